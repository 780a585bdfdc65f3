"""The CS336 Transformer LM, built from a config and a PyTorch-style state_dict (type stubs)."""
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

__all__: List[str]

_Array = Any  # numpy.ndarray or torch.Tensor (CPU)

def preset(name: str, vocab_size: int, context_length: int) -> Dict[str, Any]:
    """A CS336 size (tiny, small, medium, large, xl, 2.7B) as a config dict."""
def preset_names() -> List[str]:
    """The CS336 sizes preset() accepts, smallest first."""

class TransformerLM:
    """config: dict with vocab_size, context_length, d_model, num_layers, num_heads, d_ff and
    optionally rope_theta, rms_norm_eps (RMSNorm's epsilon, default 1e-5) and num_kv_heads (grouped-query
    attention: k_proj and v_proj then have num_kv_heads * d_head rows; default num_heads). state_dict:
    name -> float32 array/tensor (missing names keep ridge's CS336 initialisation from `seed`).
    precision: fp32 | bf16 | fp16; attention: flash | math.
    batch and seq fix the shape step() trains on; forward() takes any [batch, seq <= context]."""
    def __init__(self, config: Mapping[str, Any], state_dict: Optional[Mapping[str, _Array]] = None, *,
                 precision: str = "fp32", attention: str = "flash", batch: int = 1, seq: Optional[int] = None,
                 lr_max: float = 1e-3, lr_min: float = 1e-4, warmup_steps: int = 0, cosine_steps: int = 0,
                 weight_decay: float = 0.1, betas: Tuple[float, float] = (0.9, 0.95), eps: float = 1e-8,
                 max_grad_norm: float = 1.0, seed: int = 0) -> None: ...
    @property
    def config(self) -> Dict[str, Any]:
        """The model's configuration as a dict (rope_theta included; num_kv_heads only when it differs
        from num_heads)."""
    def names(self) -> List[str]:
        """Parameter names, as PyTorch's state_dict names them."""
    def load_state_dict(self, state_dict: Mapping[str, _Array], strict: bool = True) -> None:
        """Copies float32 tensors in by name; unknown names (and, if strict, missing ones) raise. Every
        tensor is checked (type, shape) before any is copied: on an error the model is as it was."""
    def state_dict(self) -> Dict[str, Any]:
        """name -> NumPy view of the parameter (writes go into the model)."""
    def param(self, name: str) -> Any:
        """A NumPy view of one parameter (writes go into the model)."""
    def grad(self, name: str) -> Any:
        """A NumPy view of one parameter's gradient."""
    def forward(self, inputs: _Array, targets: Optional[_Array] = None) -> float:
        """Runs the forward pass; returns the mean cross-entropy (0.0 without targets)."""
    def logits(self) -> Any:
        """Logits of the last forward, a read-only NumPy view [batch, seq, vocab] (until the next backward)."""
    def __call__(self, inputs: _Array) -> Any:
        """Logits for inputs [batch, seq] (a copy: the model's buffer is reused by the next pass)."""
    def backward(self) -> None:
        """Accumulates the loss's gradients (call zero_grad first for fresh ones)."""
    def zero_grad(self) -> None:
        """Sets every gradient to zero."""
    def step(self, inputs: _Array, targets: _Array) -> Dict[str, Any]:
        """One training step: zero_grad, forward, backward, clipping, AdamW at the scheduled rate.
        Returns {step, loss, grad_norm, lr, skipped}."""
    def save(self, path: str) -> None:
        """Writes a checkpoint: parameters, AdamW state, step, generator state and loss scale (atomically:
        a failed write leaves an existing file as it was)."""
    def train(self, data: Union[str, "os.PathLike[str]", _Array, Sequence[int], None], steps: int, *,
              log_every: int = 10, checkpoint: Optional[Union[str, "os.PathLike[str]"]] = None,
              save_every: int = 0, on_log: Optional[Callable[[Dict[str, Any]], Any]] = None,
              peak_flops: Optional[float] = None) -> Dict[str, Any]:
        """The training loop `ridge train` runs (model::train), up to `steps` steps in all: batches from
        `data` (a token file's path, a 1-D integer array, or None for random tokens), on_log(metrics) at
        every log_every-th step, the first and the last (returning True stops after it), the checkpoint at
        the end and every save_every steps. Returns {first_step, steps, stopped, last}."""
    def inference(self, weights: str = "bf16", head: Optional[str] = None, block_size: int = 16) -> "InferenceModel":
        """The weights as they are now, prepared for inference (see InferenceModel)."""
    def generate(self, prompts: Sequence[Sequence[int]], max_tokens: int = 64, *, weights: str = "bf16",
                 head: Optional[str] = None, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                 seed: int = 0, eos: Optional[int] = None, on_token: Optional[Callable[[int, int], Any]] = None,
                 return_stats: bool = False) -> Any:
        """Sampled continuations of each prompt with a KV cache (see InferenceModel.generate)."""
    def load(self, path: str) -> None:
        """Loads a checkpoint written by save() (training resumes), or a weights-only safetensors file
        (a PyTorch state_dict; the optimizer then starts fresh). The config and precision must match.
        Every metadata field and tensor is checked first: a damaged file raises ValueError naming the
        file and the field, and leaves the model as it was."""
    @classmethod
    def from_checkpoint(cls, path: str, **kwargs: Any) -> "TransformerLM":
        """The model a checkpoint of `ridge train` (or save()) holds: its config and training precision
        from the file's metadata, then load(path) with the same all-or-nothing checks. kwargs are the
        constructor's other keyword arguments; precision, if given, must be the checkpoint's."""


class InferenceModel:
    """The model's weights prepared for inference: weights fp32 | bf16 | fp8 | fp8-ue8m0 (e4m3 with
    DeepGEMM's 128x128 block scales; UE8M0: power-of-two scales); head: the lm_head's format (default:
    as weights, bf16 when weights are FP8). The KV cache is bf16 (fp32 for fp32 weights)."""
    def __init__(self, model: TransformerLM, weights: str = "bf16", head: Optional[str] = None,
                 block_size: int = 16) -> None: ...
    @property
    def weights(self) -> str: ...
    @property
    def head(self) -> str: ...
    @property
    def kv_dtype(self) -> str: ...
    def weight_bytes(self) -> float:
        """Bytes of weights one decode step reads (layers, final norm, head)."""
    def session(self, max_sequences: int = 1, cache_tokens: int = 0) -> "Session": ...
    def generate(self, prompts: Sequence[Sequence[int]], max_tokens: int = 64, *, temperature: float = 1.0,
                 top_p: float = 1.0, top_k: int = 0, seed: int = 0, eos: Optional[int] = None, num_splits: int = 0,
                 on_token: Optional[Callable[[int, int], Any]] = None, return_stats: bool = False) -> Any:
        """Sampled continuations of each prompt (a list of int lists); with return_stats, (tokens, stats)."""


class Session:
    """Sequences and their paged KV cache, step by step: prefill(prompts) -> ids, decode(ids, tokens),
    logits(id), release(id)."""
    def __init__(self, model: InferenceModel, max_sequences: int = 1, cache_tokens: int = 0) -> None: ...
    def prefill(self, prompts: Sequence[Sequence[int]]) -> List[int]: ...
    def decode(self, ids: Sequence[int], tokens: Sequence[int]) -> None: ...
    def logits(self, id: int) -> Any: ...
    def length(self, id: int) -> int: ...
    def live(self, id: int) -> bool: ...
    def release(self, id: int) -> None: ...
    @property
    def free_blocks(self) -> int: ...
    @property
    def total_blocks(self) -> int: ...
    def set_num_splits(self, n: int) -> None: ...
