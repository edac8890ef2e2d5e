"""The few image functions of ``torchvision.transforms.v2.functional`` that transformers' image processors call,
on plain tensors, in torch alone.

Why: transformers writes most image processors as ``TorchvisionBackend`` subclasses, and about ten VLMs ship no
other (no ``image_processing_pil_<m>``). Torchvision cannot be installed on every CPU machine (the package index
serves a build that does not load with a CPU torch), yet what those processors ask of it is small: resizing,
padding, cropping, normalizing, dtype scaling, grey to RGB, and the ``InterpolationMode`` enum.
``modelgraft.models.image_processor_imports`` runs upstream's image processing modules with their ``tvF`` bound
to this module instead.

Every function follows torchvision's semantics for a plain tensor ``[..., C, H, W]`` (its v2 kernels for
``torch.Tensor``), read from torchvision's source: the same torch calls in the same order, so results are equal
to torchvision's on the same machine, not merely close. Where torchvision picks a path by machine (uint8
bilinear resizing runs natively on a CPU with AVX2 or AVX-512, through float32 elsewhere), the same question is
asked here. What is not implemented is refused with :class:`UnsupportedImageOperation`, naming the function and
the option, never approximated: resizing with BOX, HAMMING or LANCZOS (transformers' own resize falls back from
LANCZOS to BICUBIC, with its warning, whenever torchvision is older than 0.27, which is how it sees this module).

PIL images, ``tv_tensors`` (boxes, masks, key points) and TorchScript are torchvision's and out of scope.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

import torch
from torch.nn import functional as F

__all__ = [
    "InterpolationMode",
    "UnsupportedImageOperation",
    "crop",
    "grayscale_to_rgb",
    "normalize",
    "pad",
    "resize",
    "to_dtype",
]


class InterpolationMode(Enum):
    """Torchvision's interpolation modes: the same member names and values (``mode.value`` is what
    ``torch.nn.functional.interpolate`` is called with)."""

    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


class UnsupportedImageOperation(NotImplementedError):
    """An operation or option of torchvision this stand-in does not implement; the message names both."""


#: Pillow's integer resampling codes, which torchvision accepts for ``interpolation`` (NEAREST_EXACT has none).
_PILLOW_CODES = {
    0: InterpolationMode.NEAREST,
    1: InterpolationMode.LANCZOS,
    2: InterpolationMode.BILINEAR,
    3: InterpolationMode.BICUBIC,
    4: InterpolationMode.BOX,
    5: InterpolationMode.HAMMING,
}
_RESIZE_MODES = (
    InterpolationMode.NEAREST,
    InterpolationMode.NEAREST_EXACT,
    InterpolationMode.BILINEAR,
    InterpolationMode.BICUBIC,
)
#: Integer dtypes whose resized values torchvision rounds before casting back.
_ROUNDED = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
_PAD_MODES = ("constant", "edge", "reflect", "symmetric")
#: Bits that carry the value of each integer dtype (the sign bit excluded), for integer-to-integer scaling.
_VALUE_BITS = {
    torch.uint8: 8,
    torch.int8: 7,
    torch.int16: 15,
    torch.uint16: 16,
    torch.int32: 31,
    torch.int64: 63,
}


def _interpolation(interpolation: InterpolationMode | int) -> InterpolationMode:
    """The mode ``interpolation`` names; a Pillow code as torchvision maps it; anything else is an error."""
    if isinstance(interpolation, InterpolationMode):
        return interpolation
    if isinstance(interpolation, int) and not isinstance(interpolation, bool):
        if interpolation not in _PILLOW_CODES:
            raise ValueError(f"resize: {interpolation} is not a Pillow resampling code ({sorted(_PILLOW_CODES)})")
        return _PILLOW_CODES[interpolation]
    raise ValueError(
        f"resize: interpolation must be an InterpolationMode of {__name__} or a Pillow integer code, "
        f"got {interpolation!r}"
    )


def _output_size(height: int, width: int, size: int | Sequence[int] | None, max_size: int | None) -> tuple[int, int]:
    """Torchvision's output size: ``[h, w]`` as given; one number is the shorter side, the longer one scaled and
    truncated, then both shrunk to ``max_size`` when the longer exceeds it; ``None`` fits the longer to ``max_size``."""
    short, long = (width, height) if width <= height else (height, width)
    if size is None:
        if not isinstance(max_size, int):
            raise ValueError(f"resize: max_size must be an integer when size is None, got {max_size!r}")
        new_short, new_long = int(max_size * short / long), max_size
    else:
        sizes = [size] if isinstance(size, int) else list(size)
        if len(sizes) == 2:
            if max_size is not None:
                raise ValueError("resize: max_size applies only when size is one number (the shorter side)")
            return int(sizes[0]), int(sizes[1])
        if len(sizes) != 1:
            raise ValueError(f"resize: size must be one number or [height, width], got {size!r}")
        new_short, new_long = sizes[0], int(sizes[0] * long / short)
        if max_size is not None:
            if max_size <= sizes[0]:
                raise ValueError(f"resize: max_size={max_size} must exceed the shorter side asked for ({sizes[0]})")
            if new_long > max_size:
                new_short, new_long = int(max_size * new_short / new_long), max_size
    return (new_long, new_short) if width <= height else (new_short, new_long)


def _native_uint8(mode: InterpolationMode, device: torch.device) -> bool:
    """Whether torchvision interpolates a uint8 image as it is, without a float32 round trip: nearest modes
    everywhere; on a CPU, bicubic, and bilinear where the CPU has AVX2 or AVX-512 (or under ``torch.compile``)."""
    if mode in (InterpolationMode.NEAREST, InterpolationMode.NEAREST_EXACT):
        return True
    if device.type != "cpu":
        return False
    if mode is InterpolationMode.BILINEAR:
        return torch.compiler.is_compiling() or torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
    return mode is InterpolationMode.BICUBIC


def resize(
    image: torch.Tensor,
    size: int | Sequence[int] | None,
    interpolation: InterpolationMode | int = InterpolationMode.BILINEAR,
    max_size: int | None = None,
    antialias: bool | None = True,
) -> torch.Tensor:
    """``image`` ``[..., C, H, W]`` resized to ``size`` with ``torch.nn.functional.interpolate``, as torchvision does:
    ``align_corners=False`` and ``antialias`` for bilinear and bicubic only (``None`` is off); an image already
    of that size is returned as it is. Float32/64 are interpolated as they are, and so is uint8 where
    torchvision keeps it (:func:`_native_uint8`); any other dtype goes through float32 and back, integers
    rounded (uint8 bicubic clamped to [0, 255] first)."""
    mode = _interpolation(interpolation)
    if mode not in _RESIZE_MODES:
        raise UnsupportedImageOperation(
            f"resize: interpolation {mode.name} is not implemented by {__name__} "
            f"(it implements {', '.join(m.name for m in _RESIZE_MODES)}); install torchvision for it"
        )
    smooth = mode in (InterpolationMode.BILINEAR, InterpolationMode.BICUBIC)
    antialias = bool(antialias) and smooth
    if image.ndim < 3:
        raise ValueError(f"resize: expected an image [..., C, H, W], got shape {tuple(image.shape)}")
    shape = image.shape
    channels, height, width = shape[-3:]
    new_height, new_width = _output_size(height, width, size, max_size)
    if (new_height, new_width) == (height, width):
        return image
    if image.numel() == 0:
        return image.reshape(shape[:-3] + (channels, new_height, new_width))
    dtype = image.dtype
    native = dtype in (torch.float32, torch.float64) or (dtype == torch.uint8 and _native_uint8(mode, image.device))
    batch = image.reshape(-1, channels, height, width)
    if not native:
        batch = batch.to(torch.float32)
    out = F.interpolate(
        batch,
        size=[new_height, new_width],
        mode=mode.value,
        align_corners=False if smooth else None,
        antialias=antialias,
    )
    if not native:
        if mode is InterpolationMode.BICUBIC and dtype == torch.uint8:
            out = out.clamp_(min=0, max=255)
        if dtype in _ROUNDED:
            out = out.round_()
        out = out.to(dtype)
    return out.reshape(shape[:-3] + (channels, new_height, new_width))


def _padding(padding: int | Sequence[int]) -> tuple[int, int, int, int]:
    """Torchvision's padding, ``[left, top, right, bottom]`` or one number for all sides or ``[left/right,
    top/bottom]``, in the order ``torch.nn.functional.pad`` takes: (left, right, top, bottom)."""
    if isinstance(padding, int):
        return padding, padding, padding, padding
    if not isinstance(padding, (list, tuple)):
        raise TypeError(f"pad: padding must be an int or a list or tuple of ints, got {padding!r}")
    if len(padding) == 1:
        return padding[0], padding[0], padding[0], padding[0]
    if len(padding) == 2:
        return padding[0], padding[0], padding[1], padding[1]
    if len(padding) == 4:
        return padding[0], padding[2], padding[1], padding[3]
    raise ValueError(f"pad: padding must be an int or 1, 2 or 4 numbers, got {len(padding)}: {padding!r}")


def _symmetric(images: torch.Tensor, left: int, right: int, top: int, bottom: int) -> torch.Tensor:
    """Mirror padding that repeats the edge pixel (``abc`` -> ``cba|abc|cba``); a negative side crops first."""
    height, width = images.shape[-2:]
    images = images[..., max(-top, 0) : height - max(-bottom, 0), max(-left, 0) : width - max(-right, 0)]
    left, right, top, bottom = (max(side, 0) for side in (left, right, top, bottom))
    height, width = images.shape[-2:]
    if max(left, right) > width or max(top, bottom) > height:
        raise ValueError(
            f"pad: symmetric padding of (left, right, top, bottom)=({left}, {right}, {top}, {bottom}) "
            f"exceeds the image's {height} x {width}"
        )
    columns = [*range(left - 1, -1, -1), *range(width), *range(width - 1, width - 1 - right, -1)]
    rows = [*range(top - 1, -1, -1), *range(height), *range(height - 1, height - 1 - bottom, -1)]
    index_rows = torch.tensor(rows, device=images.device)
    index_columns = torch.tensor(columns, device=images.device)
    return images.index_select(-2, index_rows).index_select(-1, index_columns)


def _pad_scalar(image: torch.Tensor, sides: tuple[int, int, int, int], fill: float, mode: str) -> torch.Tensor:
    shape = image.shape
    channels, height, width = shape[-3:]
    batch = image.reshape(-1, channels, height, width)
    if mode == "constant":
        out = F.pad(batch, list(sides), mode="constant", value=float(fill))
    elif mode == "symmetric":
        out = _symmetric(batch, *sides)
    else:  # torch pads "reflect" and "replicate" (torchvision's "edge") for floating-point tensors only
        floating = batch.is_floating_point()
        out = F.pad(batch if floating else batch.to(torch.float32), list(sides), mode=mode)
        out = out if floating else out.to(image.dtype)
    return out.reshape(shape[:-3] + out.shape[-3:])


def pad(
    image: torch.Tensor,
    padding: int | Sequence[int],
    fill: float | Sequence[float] | None = None,
    padding_mode: str = "constant",
) -> torch.Tensor:
    """``image`` ``[..., C, H, W]`` padded as torchvision pads a tensor: ``padding`` as :func:`_padding` reads it,
    ``padding_mode`` "constant" (``fill``, default 0: one value, or one per channel), "edge" (the border pixel),
    "reflect" (mirror without the border pixel) or "symmetric" (mirror with it). A negative side crops."""
    sides = _padding(padding)
    if padding_mode not in _PAD_MODES:
        raise ValueError(f"pad: padding_mode must be one of {', '.join(_PAD_MODES)}, got {padding_mode!r}")
    if image.ndim < 3:
        raise ValueError(f"pad: expected an image [..., C, H, W], got shape {tuple(image.shape)}")
    mode = "replicate" if padding_mode == "edge" else padding_mode
    if fill is None:
        fill = 0
    if isinstance(fill, (int, float)):
        return _pad_scalar(image, sides, fill, mode)
    if len(fill) == 1:
        return _pad_scalar(image, sides, fill[0], mode)
    if padding_mode != "constant":
        raise ValueError(f"pad: a fill per channel ({list(fill)}) needs padding_mode='constant', got {padding_mode!r}")
    out = _pad_scalar(image, sides, 0, "constant")
    # Built in the dtype torch infers, then cast: a float fill of a uint8 image truncates as torchvision's does.
    values = torch.tensor(list(fill), device=image.device).to(dtype=image.dtype).reshape(-1, 1, 1)
    left, right, top, bottom = sides
    if top > 0:
        out[..., :top, :] = values
    if left > 0:
        out[..., :, :left] = values
    if bottom > 0:
        out[..., -bottom:, :] = values
    if right > 0:
        out[..., :, -right:] = values
    return out


def crop(image: torch.Tensor, top: int, left: int, height: int, width: int) -> torch.Tensor:
    """The ``height`` x ``width`` window of ``image`` at (``top``, ``left``); what falls outside the image is 0."""
    image_height, image_width = image.shape[-2:]
    right, bottom = left + width, top + height
    if left >= 0 and top >= 0 and right <= image_width and bottom <= image_height:
        return image[..., top:bottom, left:right]
    inside = image[..., max(top, 0) : bottom, max(left, 0) : right]
    sides = (
        max(min(right, 0) - left, 0),
        max(right - max(image_width, left), 0),
        max(min(bottom, 0) - top, 0),
        max(bottom - max(image_height, top), 0),
    )
    return _pad_scalar(inside, sides, 0, "constant")


def normalize(
    image: torch.Tensor,
    mean: float | Sequence[float] | torch.Tensor,
    std: float | Sequence[float] | torch.Tensor,
    inplace: bool = False,
) -> torch.Tensor:
    """``(image - mean) / std`` per channel of a floating-point ``[..., C, H, W]``, in ``image``'s dtype and in
    place when ``inplace``; a zero in a given ``std`` list or number is an error, as in torchvision."""
    if not image.is_floating_point():
        raise TypeError(f"normalize: expected a floating-point image, got {image.dtype}")
    if image.ndim < 3:
        raise ValueError(f"normalize: expected an image [..., C, H, W], got shape {tuple(image.shape)}")
    if (isinstance(std, (list, tuple)) and not all(std)) or (isinstance(std, (int, float)) and std == 0):
        raise ValueError(f"normalize: std {std!r} has a zero, which would divide by zero")
    mean = torch.as_tensor(mean, dtype=image.dtype, device=image.device)
    std = torch.as_tensor(std, dtype=image.dtype, device=image.device)
    if mean.ndim == 1:
        mean = mean.view(-1, 1, 1)
    if std.ndim == 1:
        std = std.view(-1, 1, 1)
    image = image.sub_(mean) if inplace else image.sub(mean)
    return image.div_(std)


def grayscale_to_rgb(image: torch.Tensor) -> torch.Tensor:
    """A one-channel ``[..., 1, H, W]`` repeated into three channels; an image of three or more is returned as it is."""
    if image.ndim < 3:
        raise ValueError(f"grayscale_to_rgb: expected an image [..., C, H, W], got shape {tuple(image.shape)}")
    channels = image.shape[-3]
    if channels >= 3:
        return image
    if channels != 1:
        raise ValueError(f"grayscale_to_rgb: expected 1 channel (or 3 or more, kept), got {channels}")
    repeats = [1] * image.ndim
    repeats[-3] = 3
    return image.repeat(repeats)


def _max_value(dtype: torch.dtype) -> int:
    return torch.iinfo(dtype).max


def to_dtype(image: torch.Tensor, dtype: torch.dtype = torch.float32, scale: bool = False) -> torch.Tensor:
    """``image`` in ``dtype``; with ``scale``, values mapped between the dtypes' ranges as torchvision maps them:
    integers to floats by dividing by the integer maximum, floats in [0, 1] to integers by multiplying by the
    maximum plus ``1 - 1e-3`` and truncating (so 1.0 maps to the maximum and the bins are even), integers to
    integers by bit shifts."""
    if image.dtype == dtype:
        return image
    if not scale:
        return image.to(dtype)
    if image.is_floating_point():
        if dtype.is_floating_point:
            return image.to(dtype)
        if (image.dtype == torch.float32 and dtype in (torch.int32, torch.int64)) or (
            image.dtype == torch.float64 and dtype == torch.int64
        ):
            raise RuntimeError(f"to_dtype: {image.dtype} to {dtype} cannot be scaled without losing precision")
        return image.mul(_max_value(dtype) + 1.0 - 1e-3).to(dtype)
    if dtype.is_floating_point:
        return image.to(dtype).mul_(1.0 / _max_value(image.dtype))
    if image.dtype not in _VALUE_BITS or dtype not in _VALUE_BITS:
        raise UnsupportedImageOperation(f"to_dtype: scaling {image.dtype} to {dtype} is not implemented by {__name__}")
    shift = abs(_VALUE_BITS[image.dtype] - _VALUE_BITS[dtype])
    if _VALUE_BITS[image.dtype] > _VALUE_BITS[dtype]:
        if image.dtype == torch.uint16:  # uint16 has no bit shifts in torch
            return (image / 2**shift).to(dtype)
        return image.bitwise_right_shift(shift).to(dtype)
    if dtype == torch.uint16:
        return image.to(dtype) * 2**shift
    return image.to(dtype).bitwise_left_shift_(shift)
