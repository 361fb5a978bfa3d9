"""Exact formulations of a VALID 2-D convolution, for the Atari and GFootball CNNs on XLA CPU.

XLA CPU runs a float32 matrix product several times faster than the Nature CNN's convolutions, and which form of
the same convolution is fastest differs between the forward pass, the gradient and the layer (`benchmarks/cnn_cpu.py`
times them). Every form here computes the same function of the
same parameters as `flax.linen.Conv(O, (k, k), strides=(s, s), padding="VALID")` (kernel `[k, k, C, O]`, bias
`[O]`), on NHWC input, up to float rounding:

* `direct`: `lax.conv_general_dilated` (what `nn.Conv` runs; cuDNN's fast path on a GPU).
* `slices`: the k x k strided slices of the input, concatenated to `[B, oh, ow, k k C]` patches, times the kernel
  as a `[k k C, O]` matrix (im2col by static slices).
* `patches`: the same product on `lax.conv_general_dilated_patches` (features ordered (C, ky, kx)).
* `space_to_depth` (k divisible by s): the input cut into s x s blocks (`[B, H/s, W/s, s s C]`), then a stride-1
  (k/s) x (k/s) convolution over blocks by static slices and one matrix product: fewer, larger slices.
* `shift_add` (k divisible by s): blocks times all kernel taps in one product, then the sum of shifted windows.
* `blocks_direct` (k divisible by s): XLA's convolution over the blocks.
* `cm_slices`, `cm_space_to_depth`: the slices and space-to-depth forms in the channels-major layout
  `[C, B, H, W]`, whose patch matrix is built from whole spatial rows and whose product leaves the output
  channels-major for the next layer (a network transposes once on the way in and once before its dense layer).

`conv(x, kernel, bias, stride, forward=..., backward=...)` uses one form for the forward pass and another for the
gradient (a `jax.custom_vjp` whose backward pass is the chosen form's vector-Jacobian product). A convolution is
linear in its input and in its kernel, so the gradient of one form is the gradient of every form.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

FORMS = ("direct", "slices", "patches", "space_to_depth", "shift_add", "blocks_direct", "cm_slices",
         "cm_space_to_depth")
STRIDE_DIVIDES_KERNEL = ("space_to_depth", "shift_add", "blocks_direct", "cm_space_to_depth")
CHANNELS_MAJOR = ("cm_slices", "cm_space_to_depth")  # forms on [C, B, H, W] input with [O, B, oh, ow] output


def channels_major(form: str) -> bool:
    return form in CHANNELS_MAJOR


def out_size(size: int, kernel: int, stride: int) -> int:
    return (size - kernel) // stride + 1


def conv_direct(x: jnp.ndarray, kernel: jnp.ndarray, stride: int) -> jnp.ndarray:
    """[B, H, W, C] x [k, k, C, O] -> [B, oh, ow, O] (no bias)."""
    return lax.conv_general_dilated(x, kernel, (stride, stride), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def conv_slices(x: jnp.ndarray, kernel: jnp.ndarray, stride: int) -> jnp.ndarray:
    batch, height, width, channels = x.shape
    k, features = kernel.shape[0], kernel.shape[-1]
    oh, ow = out_size(height, k, stride), out_size(width, k, stride)
    columns = [
        lax.slice(x, (0, ky, kx, 0), (batch, ky + stride * (oh - 1) + 1, kx + stride * (ow - 1) + 1, channels),
                  (1, stride, stride, 1))
        for ky in range(k) for kx in range(k)
    ]  # k k x [B, oh, ow, C], ordered (ky, kx)
    patches = jnp.concatenate(columns, axis=-1)  # [B, oh, ow, k k C]
    return patches @ kernel.reshape(k * k * channels, features)


def conv_patches(x: jnp.ndarray, kernel: jnp.ndarray, stride: int) -> jnp.ndarray:
    channels, features = x.shape[-1], kernel.shape[-1]
    k = kernel.shape[0]
    patches = lax.conv_general_dilated_patches(x, (k, k), (stride, stride), "VALID",
                                               dimension_numbers=("NHWC", "HWIO", "NHWC"))  # [B, oh, ow, C k k]
    matrix = kernel.transpose(2, 0, 1, 3).reshape(channels * k * k, features)  # (c, ky, kx) x O
    return patches @ matrix


def conv_space_to_depth(x: jnp.ndarray, kernel: jnp.ndarray, stride: int) -> jnp.ndarray:
    batch, height, width, channels = x.shape
    k, features = kernel.shape[0], kernel.shape[-1]
    if k % stride:
        raise ValueError(f"space_to_depth needs the kernel ({k}) divisible by the stride ({stride})")
    oh, ow = out_size(height, k, stride), out_size(width, k, stride)
    m = k // stride  # kernel size over blocks
    bh, bw = oh + m - 1, ow + m - 1  # blocks read
    x = x[:, : bh * stride, : bw * stride]
    blocks = x.reshape(batch, bh, stride, bw, stride, channels).transpose(0, 1, 3, 2, 4, 5)
    blocks = blocks.reshape(batch, bh, bw, stride * stride * channels)  # features (dy, dx, c)
    columns = [blocks[:, by : by + oh, bx : bx + ow] for by in range(m) for bx in range(m)]
    patches = jnp.concatenate(columns, axis=-1)  # [B, oh, ow, m m s s C], features (by, bx, dy, dx, c)
    # kernel[s by + dy, s bx + dx, c, o] -> matrix[(by, bx, dy, dx, c), o]
    matrix = kernel.reshape(m, stride, m, stride, channels, features).transpose(0, 2, 1, 3, 4, 5)
    return patches @ matrix.reshape(m * m * stride * stride * channels, features)


def _blocks(x: jnp.ndarray, stride: int, rows: int, cols: int) -> jnp.ndarray:
    """[B, H, W, C] -> [B, rows, cols, s s C]: the first rows x cols blocks of s x s pixels, features (dy, dx, c)."""
    batch, channels = x.shape[0], x.shape[-1]
    x = x[:, : rows * stride, : cols * stride]
    blocks = x.reshape(batch, rows, stride, cols, stride, channels).transpose(0, 1, 3, 2, 4, 5)
    return blocks.reshape(batch, rows, cols, stride * stride * channels)


def conv_shift_add(x: jnp.ndarray, kernel: jnp.ndarray, stride: int) -> jnp.ndarray:
    """Matrix product first, shifted sum after: with the input cut into s x s blocks (k divisible by s), one product
    of every block with all m x m kernel taps (m = k / s) at once, `[B, bh, bw, s s C] x [s s C, m m O]`, then the
    output as the sum of m x m shifted windows of it, one tap's O channels each. No patch matrix is built (XLA CPU
    concatenates slow along the minor dimension); the product computes (bh bw) / (oh ow) times the output's work."""
    height, width, channels = x.shape[1:]
    k, features = kernel.shape[0], kernel.shape[-1]
    if k % stride:
        raise ValueError(f"shift_add needs the kernel ({k}) divisible by the stride ({stride})")
    oh, ow = out_size(height, k, stride), out_size(width, k, stride)
    m = k // stride
    blocks = _blocks(x, stride, oh + m - 1, ow + m - 1)  # [B, bh, bw, s s C], features (dy, dx, c)
    # kernel[s by + dy, s bx + dx, c, o] -> matrix[(dy, dx, c), (by, bx, o)]
    matrix = kernel.reshape(m, stride, m, stride, channels, features).transpose(1, 3, 4, 0, 2, 5)
    taps = blocks @ matrix.reshape(stride * stride * channels, m * m * features)  # [B, bh, bw, m m O]
    out = None
    for by in range(m):
        for bx in range(m):
            tap = (by * m + bx) * features
            window = taps[:, by : by + oh, bx : bx + ow, tap : tap + features]
            out = window if out is None else out + window
    return out


def conv_blocks_direct(x: jnp.ndarray, kernel: jnp.ndarray, stride: int) -> jnp.ndarray:
    """XLA's convolution after space-to-depth: the input cut into s x s blocks (`[B, bh, bw, s s C]`), then a
    stride-1 (k/s) x (k/s) convolution over blocks with s s times the input channels (XLA CPU's convolution is
    much faster with many input channels than with the 4 stacked frames)."""
    height, width, channels = x.shape[1:]
    k, features = kernel.shape[0], kernel.shape[-1]
    if k % stride:
        raise ValueError(f"blocks_direct needs the kernel ({k}) divisible by the stride ({stride})")
    m = k // stride
    oh, ow = out_size(height, k, stride), out_size(width, k, stride)
    blocks = _blocks(x, stride, oh + m - 1, ow + m - 1)
    # kernel[s by + dy, s bx + dx, c, o] -> block kernel[by, bx, (dy, dx, c), o]
    block_kernel = kernel.reshape(m, stride, m, stride, channels, features).transpose(0, 2, 1, 3, 4, 5)
    return conv_direct(blocks, block_kernel.reshape(m, m, stride * stride * channels, features), 1)


# ----------------------------------------------------------------------------------------------------- channels major


def to_channels_major(x: jnp.ndarray) -> jnp.ndarray:
    """[B, H, W, C] -> [C, B, H, W]."""
    return x.transpose(3, 0, 1, 2)


def from_channels_major(x: jnp.ndarray) -> jnp.ndarray:
    """[C, B, H, W] -> [B, H, W, C]."""
    return x.transpose(1, 2, 3, 0)


def cm_patches(x: jnp.ndarray, kernel_size: int, stride: int) -> jnp.ndarray:
    """Channels-major im2col: `x` [C, B, H, W] -> the patch matrix `[k k C, B oh ow]`, rows ordered (ky, kx, c). The
    k x k strided slices (each [C, B, oh, ow]) are stacked on a new leading axis, so the matrix is built from whole
    rows of the spatial dimensions (the fast copy on XLA CPU, where the channels-last concatenation copies 64-float
    pieces)."""
    channels, batch, height, width = x.shape
    k = kernel_size
    oh, ow = out_size(height, k, stride), out_size(width, k, stride)
    rows = [
        lax.slice(x, (0, 0, ky, kx), (channels, batch, ky + stride * (oh - 1) + 1, kx + stride * (ow - 1) + 1),
                  (1, 1, stride, stride))
        for ky in range(k) for kx in range(k)
    ]  # k k x [C, B, oh, ow], ordered (ky, kx)
    return jnp.stack(rows, axis=0).reshape(k * k * channels, batch * oh * ow)


def cm_slices(x: jnp.ndarray, kernel: jnp.ndarray, stride: int) -> jnp.ndarray:
    """Channels-major im2col convolution: `x` [C, B, H, W] -> [O, B, oh, ow], the product
    `[O, k k C] x [k k C, B oh ow]` of the kernel and `cm_patches`, which leaves the output channels-major for the next
    layer."""
    channels, batch, height, width = x.shape
    k, features = kernel.shape[0], kernel.shape[-1]
    oh, ow = out_size(height, k, stride), out_size(width, k, stride)
    patches = cm_patches(x, k, stride)
    out = kernel.reshape(k * k * channels, features).T @ patches  # [O, B oh ow]
    return out.reshape(features, batch, oh, ow)


def cm_blocks(x: jnp.ndarray, kernel_size: int, stride: int) -> jnp.ndarray:
    """`x` [C, B, H, W] cut into s x s blocks: [s s C, B, H/s, W/s] with features (dy, dx, c), trimmed to the rows
    and columns a k x k, stride-s convolution reads. Any dtype (the frames' uint8 too)."""
    channels, batch, height, width = x.shape
    m = kernel_size // stride
    bh, bw = out_size(height, kernel_size, stride) + m - 1, out_size(width, kernel_size, stride) + m - 1
    x = x[:, :, : bh * stride, : bw * stride].reshape(channels, batch, bh, stride, bw, stride)
    return x.transpose(3, 5, 0, 1, 2, 4).reshape(stride * stride * channels, batch, bh, bw)


def block_kernel(kernel: jnp.ndarray, stride: int) -> jnp.ndarray:
    """kernel[s by + dy, s bx + dx, c, o] -> the block kernel [by, bx, (dy, dx, c), o] that `cm_blocks`' output
    takes at stride 1."""
    k, _, channels, features = kernel.shape
    m = k // stride
    block = kernel.reshape(m, stride, m, stride, channels, features).transpose(0, 2, 1, 3, 4, 5)
    return block.reshape(m, m, stride * stride * channels, features)


def cm_space_to_depth(x: jnp.ndarray, kernel: jnp.ndarray, stride: int) -> jnp.ndarray:
    """Channels-major space-to-depth: `x` [C, B, H, W] cut into s x s blocks (`cm_blocks`), then `cm_slices` of the
    (k/s) x (k/s) block kernel with stride 1 (strided slices avoided)."""
    k = kernel.shape[0]
    if k % stride:
        raise ValueError(f"cm_space_to_depth needs the kernel ({k}) divisible by the stride ({stride})")
    return cm_slices(cm_blocks(x, k, stride), block_kernel(kernel, stride), 1)


_FORM_FNS = {"direct": conv_direct, "slices": conv_slices, "patches": conv_patches,
             "space_to_depth": conv_space_to_depth, "shift_add": conv_shift_add, "blocks_direct": conv_blocks_direct,
             "cm_slices": cm_slices, "cm_space_to_depth": cm_space_to_depth}


@functools.cache
def _mixed(forward: str, backward: str, stride: int):
    """`f(x, kernel)` that runs `forward` and differentiates through `backward`."""
    fwd_fn, bwd_fn = _FORM_FNS[forward], _FORM_FNS[backward]

    @jax.custom_vjp
    def f(x, kernel):
        return fwd_fn(x, kernel, stride)

    def f_fwd(x, kernel):
        return fwd_fn(x, kernel, stride), (x, kernel)

    def f_bwd(residuals, grad):
        x, kernel = residuals
        _, vjp = jax.vjp(lambda a, b: bwd_fn(a, b, stride), x, kernel)
        return vjp(grad)

    f.defvjp(f_fwd, f_bwd)
    return f


def conv(x: jnp.ndarray, kernel: jnp.ndarray, bias: jnp.ndarray, stride: int, *, forward: str = "direct",
         backward: str | None = None) -> jnp.ndarray:
    """VALID convolution of `x` with `kernel` [k, k, C, O] and `bias` [O]: `forward` form on the way forward,
    `backward` form's gradient (default: the same form's own). Layout: NHWC [B, H, W, C] -> [B, oh, ow, O], or for
    the `CHANNELS_MAJOR` forms [C, B, H, W] -> [O, B, oh, ow]; both forms must take the same layout."""
    backward = backward or forward
    for form in (forward, backward):
        if form not in _FORM_FNS:
            raise ValueError(f"unknown convolution form '{form}'; known: {', '.join(FORMS)}")
    if channels_major(forward) != channels_major(backward):
        raise ValueError(f"forms '{forward}' and '{backward}' take different layouts")
    if backward == forward:
        out = _FORM_FNS[forward](x, kernel, stride)
    else:
        out = _mixed(forward, backward, stride)(x, kernel)
    return out + (bias[:, None, None, None] if channels_major(forward) else bias)
