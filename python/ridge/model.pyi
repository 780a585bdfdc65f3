"""The CS336 Transformer LM, built from a config and a PyTorch-style state_dict (type stubs)."""
from typing import Any, Dict, List, Mapping, Optional, Tuple

__all__: List[str]

_Array = Any  # numpy.ndarray or torch.Tensor (CPU)

def preset(name: str, vocab_size: int, context_length: int) -> Dict[str, Any]:
    """A CS336 size (tiny, small, medium, large, xl, 2.7B) as a config dict."""
def preset_names() -> List[str]:
    """The CS336 sizes preset() accepts, smallest first."""

class TransformerLM:
    """config: dict with vocab_size, context_length, d_model, num_layers, num_heads, d_ff and
    optionally rope_theta and num_kv_heads (grouped-query attention: k_proj and v_proj then have
    num_kv_heads * d_head rows; default num_heads). state_dict: name -> float32 array/tensor (missing names keep ridge's
    CS336 initialisation from `seed`). precision: fp32 | bf16 | fp16; attention: flash | math.
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
    def load(self, path: str) -> None:
        """Loads a checkpoint written by save() (training resumes), or a weights-only safetensors file
        (a PyTorch state_dict; the optimizer then starts fresh). The config and precision must match.
        Every metadata field and tensor is checked first: a damaged file raises ValueError naming the
        file and the field, and leaves the model as it was."""
