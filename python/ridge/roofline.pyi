"""The roofline analyzer: chips, cost models, bounds, critical batch, collectives (type stubs)."""
from typing import Any, Dict, List, Optional, Sequence, Union

__all__: List[str]

class Chip:
    """A chip's published (or probed) figures, loaded from its JSON chip file."""
    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str:
        """"gpu", "tpu" or "cpu"."""
    @property
    def origin(self) -> str:
        """The file (or "embedded:<id>") the chip was loaded from."""
    def peak(self, dtype: str) -> float:
        """Dense FLOP/s for a dtype (fp64, fp32, tf32, bf16, fp16, fp8, int8); ValueError naming the
        dtypes the chip has when it lacks this one."""
    def has_peak(self, dtype: str) -> bool: ...
    def bandwidth(self, level: str = "") -> float:
        """Bytes/s of a memory level ("hbm", "dram", "l3", ...); the outermost when empty."""
    def link_bandwidth(self, which: str = "intra_node") -> float:
        """Bytes/s one way over "intra_node" or "inter_node"; ValueError if the chip has no such link."""
    def describe(self) -> str:
        """The chip's figures with their sources, as `ridge hw show` prints them."""

class Cost:
    """An operation's FLOPs and bytes (through memory and over a link)."""
    @property
    def op(self) -> str: ...
    @property
    def shape(self) -> str: ...
    @property
    def compute(self) -> str:
        """The peak_flops key the FLOPs run at ("bf16", "fp8", ...)."""
    @property
    def flops(self) -> float: ...
    @property
    def memory_bytes(self) -> float: ...
    @property
    def link_bytes(self) -> float: ...
    @property
    def intensity(self) -> float:
        """FLOPs per memory byte; NaN for an op that moves no memory bytes."""

class Bound:
    """The roofline bound of a Cost on a Chip: times in seconds, which roof binds."""
    @property
    def chip(self) -> str: ...
    @property
    def level(self) -> str: ...
    @property
    def peak(self) -> float: ...
    @property
    def bandwidth(self) -> float: ...
    @property
    def link_bandwidth(self) -> float: ...
    @property
    def flops(self) -> float: ...
    @property
    def memory_bytes(self) -> float: ...
    @property
    def link_bytes(self) -> float: ...
    @property
    def intensity(self) -> float: ...
    @property
    def ridge_intensity(self) -> float: ...
    @property
    def t_math(self) -> float: ...
    @property
    def t_memory(self) -> float: ...
    @property
    def t_link(self) -> float: ...
    @property
    def t_comm(self) -> float: ...
    @property
    def t_lower(self) -> float:
        """max(T_math, T_comm): the time no implementation can beat."""
    @property
    def t_upper(self) -> float:
        """T_math + T_comm: no overlap at all."""
    @property
    def binding(self) -> str:
        """"compute", "memory" or "link"."""
    @property
    def attainable_flops(self) -> float: ...
    @property
    def fraction_of_peak(self) -> float: ...

def load_chip(name_or_path: str) -> Chip:
    """A chip from the database ("h100", "tpu-v5e", ...), a JSON chip file, or "this" (ridge probe's result)."""
def chip_ids() -> List[str]:
    """Ids of the chips in the database, sorted."""
def bound(cost: Cost, chip: Chip, level: str = "", link: str = "intra_node") -> Bound:
    """The roofline bound of `cost` on `chip` at a memory level ("" = outermost) and link."""
def describe(cost: Cost, bound: Bound, chip: Chip) -> str:
    """A multi-line account of one cost on one chip, as the CLI prints it."""
def matmul(b: int, d: int, f: int, x: str = "bf16", w: str = "bf16", out: str = "bf16", compute: str = "") -> Cost:
    """X[B,D] @ W[D,F] -> Y[B,F] with the given dtypes (compute "" = the wider of x and w)."""
def attention(batch: int, heads: int, seq_q: int, seq_kv: int, head_dim: int = 64, dtype: str = "bf16",
              causal: bool = False, backward: bool = False, flash: bool = True) -> Cost:
    """Attention, flash (scores tiled on chip) or naive (S and P written and read back)."""
def fp8_gemm(m: int, n: int, k: int, out: str = "bf16") -> Cost:
    """D[m,n] = A[m,k] B[n,k]^T in fp8 with DeepGEMM's block scales."""
def grouped_gemm_contiguous(m_per_group: Sequence[int], n: int, k: int) -> Cost:
    """M-grouped fp8 GEMM for MoE, groups' rows packed back to back."""
def grouped_gemm_masked(max_m: int, valid_m: Sequence[int], n: int, k: int) -> Cost:
    """M-grouped fp8 GEMM for MoE, only valid_m[g] rows of each group counted."""
def all_reduce(bytes: int, chips: int, dtype: str = "bf16") -> Cost:
    """Ring all-reduce of a `bytes` buffer over `chips` chips: 2(n-1)/n of it over each link."""
def all_gather(bytes: int, chips: int, dtype: str = "bf16") -> Cost:
    """Ring all-gather: (n-1)/n of the full buffer over each link."""
def reduce_scatter(bytes: int, chips: int, dtype: str = "bf16") -> Cost:
    """Ring reduce-scatter: (n-1)/n of the full buffer over each link."""
def critical_batch(chip: Chip, d: int, f: int, x: str = "bf16", w: str = "bf16", out: str = "bf16",
                   compute: str = "", level: str = "") -> Dict[str, Any]:
    """Smallest token batch B at which X[B,D] @ W[D,F] is compute-bound on `chip` (exact, or None
    when never), and the asymptotic peak/bw * size(w)/2."""
def critical_split_d(chip: Chip, chips: int, link: str = "intra_node") -> Dict[str, Any]:
    """For D split over `chips` with an all-reduce of the partial sums: the D above which the
    matmul is compute-bound against the link."""
def decode(config: Dict[str, Any], batch: int = 1, context: Optional[int] = None, weights: str = "bf16",
           head: Optional[str] = None, embedding: Optional[str] = None, kv: Optional[str] = None,
           chip: Union[Chip, str] = "h100", level: str = "", prompt: int = 0, sweep: bool = False,
           expert_histogram: Optional[Sequence[float]] = None) -> Dict[str, Any]:
    """The roofline of generating with a Transformer LM (`ridge roofline decode --json`'s document, less its
    "model" label): one decode step of `batch` sequences at `context` keys each (default the config's
    context_length) with weights fp32 | bf16 | fp8 (128x128 scales), the head and embedding dtypes (default the
    weights', bf16 for fp8), the KV cache dtype (default fp32 for fp32 weights, else bf16); bytes split into
    weights, KV cache read, K/V written and activations; FLOPs; the time and tokens/s bounds; the critical
    batch with the KV cache counted; the prefill of `prompt` tokens when > 0; with `sweep`, batch 1, 2, 4, ...
    An MoE config (num_experts, top_k, num_shared_experts, d_expert, moe_layers) reads only the experts its batch
    routes to (uniform routing, or `expert_histogram`: one share or token count per expert) and adds its keys."""
def to_dict(obj: Union[Chip, Cost, Bound]) -> Dict[str, Any]:
    """The JSON form of a Chip, Cost or Bound (what the CLI's --json prints)."""
