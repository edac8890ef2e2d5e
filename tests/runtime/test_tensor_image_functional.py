"""The torch stand-in for torchvision's image functions computes what torchvision's v2 tensor kernels compute.

Each expectation is written out from torchvision's semantics (its ``resize_image``, ``pad_image``, ``crop_image``,
``normalize_image``, ``grayscale_to_rgb_image`` and ``to_dtype_image``), with a direct torch call or numpy's
padding as the oracle, never by calling the stand-in twice.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from modelgraft.models import tensor_image_functional as tvF
from modelgraft.models.tensor_image_functional import InterpolationMode, UnsupportedImageOperation


def _image(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.rand(*shape, generator=generator, dtype=dtype)
    return torch.randint(0, 256, shape, generator=generator, dtype=torch.int64).to(dtype)


# -- InterpolationMode --------------------------------------------------------------------------------------------


def test_interpolation_modes_have_torchvision_s_names_and_values() -> None:
    assert {mode.name: mode.value for mode in InterpolationMode} == {
        "NEAREST": "nearest",
        "NEAREST_EXACT": "nearest-exact",
        "BILINEAR": "bilinear",
        "BICUBIC": "bicubic",
        "BOX": "box",
        "HAMMING": "hamming",
        "LANCZOS": "lanczos",
    }


# -- resize -------------------------------------------------------------------------------------------------------


def test_float_bilinear_resize_is_interpolate_without_aligned_corners_and_with_antialias() -> None:
    image = _image(3, 17, 23)

    resized = tvF.resize(image, [9, 11], interpolation=InterpolationMode.BILINEAR, antialias=True)

    expected = F.interpolate(image[None], size=[9, 11], mode="bilinear", align_corners=False, antialias=True)[0]
    assert torch.equal(resized, expected)


def test_antialias_false_is_kept_for_bicubic() -> None:
    image = _image(3, 17, 23)

    resized = tvF.resize(image, [9, 11], interpolation=InterpolationMode.BICUBIC, antialias=False)

    expected = F.interpolate(image[None], size=[9, 11], mode="bicubic", align_corners=False, antialias=False)[0]
    assert torch.equal(resized, expected)


@pytest.mark.parametrize("mode", [InterpolationMode.NEAREST, InterpolationMode.NEAREST_EXACT])
def test_nearest_modes_drop_antialias(mode: InterpolationMode) -> None:
    """torch's interpolate refuses antialias for these modes: torchvision turns it off, whatever was asked."""
    image = _image(3, 17, 23)

    resized = tvF.resize(image, [9, 11], interpolation=mode, antialias=True)

    assert torch.equal(resized, F.interpolate(image[None], size=[9, 11], mode=mode.value)[0])


def test_uint8_bicubic_on_a_cpu_interpolates_the_uint8_image_itself() -> None:
    image = _image(3, 17, 23, dtype=torch.uint8)

    resized = tvF.resize(image, [30, 41], interpolation=InterpolationMode.BICUBIC)

    expected = F.interpolate(image[None], size=[30, 41], mode="bicubic", align_corners=False, antialias=True)[0]
    assert resized.dtype == torch.uint8
    assert torch.equal(resized, expected)


def test_uint8_bicubic_through_float_is_clamped_then_rounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where torchvision does not interpolate uint8 itself (on a GPU), bicubic's overshoot is clamped to [0, 255]
    and the values rounded; an upscale of a checkerboard overshoots both ways."""
    monkeypatch.setattr(tvF, "_native_uint8", lambda mode, device: False)
    image = (torch.arange(8 * 8).reshape(1, 8, 8) % 2 * 255).to(torch.uint8)

    resized = tvF.resize(image, [20, 20], interpolation=InterpolationMode.BICUBIC, antialias=False)

    floats = F.interpolate(image[None].float(), size=[20, 20], mode="bicubic", align_corners=False)[0]
    assert floats.min() < 0 and floats.max() > 255  # the case being tested: values outside the uint8 range
    assert torch.equal(resized, floats.clamp(0, 255).round().to(torch.uint8))


@pytest.mark.parametrize("capability", ["AVX2", "AVX512"])
def test_uint8_bilinear_with_avx2_or_avx512_interpolates_uint8(monkeypatch: pytest.MonkeyPatch, capability) -> None:
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    image = _image(3, 37, 29, dtype=torch.uint8)

    resized = tvF.resize(image, [14, 11])

    expected = F.interpolate(image[None], size=[14, 11], mode="bilinear", align_corners=False, antialias=True)[0]
    assert torch.equal(resized, expected)


def test_uint8_bilinear_without_avx2_goes_through_float32_and_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    image = _image(3, 37, 29, dtype=torch.uint8)

    resized = tvF.resize(image, [14, 11])

    floats = F.interpolate(image[None].float(), size=[14, 11], mode="bilinear", align_corners=False, antialias=True)
    assert torch.equal(resized, floats[0].round().to(torch.uint8))


def test_half_precision_is_resized_in_float32_and_cast_back_unrounded() -> None:
    image = _image(3, 17, 23).to(torch.float16)

    resized = tvF.resize(image, [9, 11])

    floats = F.interpolate(image[None].float(), size=[9, 11], mode="bilinear", align_corners=False, antialias=True)
    assert resized.dtype == torch.float16
    assert torch.equal(resized, floats[0].to(torch.float16))


@pytest.mark.parametrize(
    ("height", "width", "size", "max_size", "expected"),
    [
        (30, 45, 20, None, (20, 30)),  # the shorter side to 20, the longer scaled and truncated
        (45, 31, [20], None, (29, 20)),  # 20 * 45 / 31 = 29.03
        (30, 90, 20, 50, (16, 50)),  # 60 > 50: the longer side to 50, the shorter 50 * 20 / 60
        (30, 90, None, 45, (15, 45)),  # no size: the longer side to max_size
    ],
)
def test_one_number_is_the_shorter_side(height, width, size, max_size, expected) -> None:
    resized = tvF.resize(_image(3, height, width), size, max_size=max_size)

    assert tuple(resized.shape[-2:]) == expected


def test_an_image_already_of_the_size_is_returned_as_it_is() -> None:
    image = _image(3, 9, 11)

    assert tvF.resize(image, [9, 11]) is image


def test_leading_dimensions_are_kept() -> None:
    images = _image(2, 4, 3, 17, 23)

    resized = tvF.resize(images, [9, 11])

    expected = F.interpolate(images.reshape(8, 3, 17, 23), size=[9, 11], mode="bilinear", antialias=True)
    assert torch.equal(resized, expected.reshape(2, 4, 3, 9, 11))


def test_a_pillow_resampling_code_names_its_mode() -> None:
    image = _image(3, 17, 23)

    assert torch.equal(
        tvF.resize(image, [9, 11], interpolation=3), tvF.resize(image, [9, 11], InterpolationMode.BICUBIC)
    )


@pytest.mark.parametrize("mode", [InterpolationMode.BOX, InterpolationMode.HAMMING, InterpolationMode.LANCZOS])
def test_a_mode_the_stand_in_lacks_is_refused_by_name(mode: InterpolationMode) -> None:
    with pytest.raises(UnsupportedImageOperation, match=rf"resize: interpolation {mode.name} is not implemented"):
        tvF.resize(_image(3, 17, 23), [9, 11], interpolation=mode)


# -- pad ----------------------------------------------------------------------------------------------------------


def test_padding_is_left_top_right_bottom() -> None:
    image = _image(3, 5, 6)

    padded = tvF.pad(image, [1, 2, 3, 4], fill=7)

    assert torch.equal(padded, F.pad(image, [1, 3, 2, 4], value=7.0))
    assert padded.shape == (3, 5 + 2 + 4, 6 + 1 + 3)


@pytest.mark.parametrize(("padding", "sides"), [(2, (2, 2, 2, 2)), ([3], (3, 3, 3, 3)), ([1, 2], (1, 1, 2, 2))])
def test_short_paddings_cover_the_sides_as_torchvision_reads_them(padding, sides) -> None:
    image = _image(3, 5, 6)

    assert torch.equal(tvF.pad(image, padding), F.pad(image, list(sides)))


@pytest.mark.parametrize(
    ("mode", "numpy_mode"), [("edge", "edge"), ("reflect", "reflect"), ("symmetric", "symmetric")]
)
def test_padding_modes_match_numpy_s(mode: str, numpy_mode: str) -> None:
    """torchvision's modes are numpy's: reflect mirrors without the border pixel, symmetric with it."""
    image = _image(2, 3, 5, 6, dtype=torch.uint8)

    padded = tvF.pad(image, [2, 1, 3, 4], padding_mode=mode)

    expected = np.pad(image.numpy(), [(0, 0), (0, 0), (1, 4), (2, 3)], mode=numpy_mode)
    assert padded.dtype == torch.uint8
    assert np.array_equal(padded.numpy(), expected)


def test_a_fill_per_channel_paints_each_channel_s_border() -> None:
    image = _image(3, 4, 4, dtype=torch.uint8)

    padded = tvF.pad(image, [1, 0, 0, 2], fill=[10, 20, 30])

    expected = np.stack(
        [np.pad(image[c].numpy(), [(0, 2), (1, 0)], constant_values=value) for c, value in enumerate([10, 20, 30])]
    )
    assert np.array_equal(padded.numpy(), expected)


def test_an_unknown_padding_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="padding_mode must be one of constant, edge, reflect, symmetric"):
        tvF.pad(_image(3, 4, 4), 1, padding_mode="wrap")


def test_a_fill_per_channel_with_a_mirroring_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="needs padding_mode='constant'"):
        tvF.pad(_image(3, 4, 4), 1, fill=[1, 2, 3], padding_mode="reflect")


# -- crop ---------------------------------------------------------------------------------------------------------


def test_a_crop_inside_the_image_is_a_slice() -> None:
    image = _image(3, 10, 12)

    assert torch.equal(tvF.crop(image, 2, 3, 5, 4), image[:, 2:7, 3:7])


def test_what_a_crop_takes_beyond_the_image_is_zero() -> None:
    image = _image(3, 4, 5) + 1  # no zeros of its own

    cropped = tvF.crop(image, -1, 3, 6, 4)

    expected = torch.zeros(3, 6, 4)
    expected[:, 1:5, 0:2] = image[:, :, 3:5]
    assert torch.equal(cropped, expected)


# -- normalize ----------------------------------------------------------------------------------------------------


def test_normalize_subtracts_the_mean_and_divides_by_the_std_per_channel() -> None:
    image = _image(2, 3, 4, 5)
    mean, std = [0.1, 0.5, 0.9], [0.2, 0.25, 0.5]

    normalized = tvF.normalize(image, mean, std)

    expected = (image - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[:, None, None]
    assert torch.allclose(normalized, expected, rtol=0, atol=1e-6)


def test_normalize_in_place_writes_into_the_image() -> None:
    image = _image(3, 4, 5)

    normalized = tvF.normalize(image, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5], inplace=True)

    assert normalized.data_ptr() == image.data_ptr()


def test_normalize_leaves_the_image_alone_otherwise() -> None:
    image = _image(3, 4, 5)
    before = image.clone()

    tvF.normalize(image, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5])

    assert torch.equal(image, before)


def test_normalize_refuses_an_integer_image() -> None:
    with pytest.raises(TypeError, match="expected a floating-point image, got torch.uint8"):
        tvF.normalize(_image(3, 4, 5, dtype=torch.uint8), [0.5] * 3, [0.5] * 3)


def test_normalize_refuses_a_zero_std() -> None:
    with pytest.raises(ValueError, match="would divide by zero"):
        tvF.normalize(_image(3, 4, 5), [0.5] * 3, [0.5, 0.0, 0.5])


# -- grayscale_to_rgb ---------------------------------------------------------------------------------------------


def test_one_channel_is_repeated_into_three() -> None:
    image = _image(2, 1, 4, 5)

    rgb = tvF.grayscale_to_rgb(image)

    assert torch.equal(rgb, image.expand(2, 3, 4, 5))


@pytest.mark.parametrize("channels", [3, 4])
def test_three_or_more_channels_are_returned_as_they_are(channels: int) -> None:
    image = _image(channels, 4, 5)

    assert tvF.grayscale_to_rgb(image) is image


# -- to_dtype -----------------------------------------------------------------------------------------------------


def test_uint8_to_float_scales_by_255() -> None:
    image = _image(3, 4, 5, dtype=torch.uint8)

    assert torch.equal(tvF.to_dtype(image, torch.float32, scale=True), image.float() * (1.0 / 255))


def test_float_to_uint8_multiplies_by_255_999_and_truncates() -> None:
    image = torch.tensor([[[0.0, 0.5, 0.998, 1.0]]])

    converted = tvF.to_dtype(image, torch.uint8, scale=True)

    assert converted.tolist() == [[[0, 127, 255, 255]]]  # 0.5 * 255.999 = 127.9995, 0.998 * 255.999 = 255.49


def test_uint8_to_int16_shifts_by_the_difference_of_value_bits() -> None:
    image = torch.tensor([[[0, 1, 255]]], dtype=torch.uint8)

    assert tvF.to_dtype(image, torch.int16, scale=True).tolist() == [[[0, 1 << 7, 255 << 7]]]


def test_without_scale_to_dtype_only_casts() -> None:
    image = _image(3, 4, 5, dtype=torch.uint8)

    assert torch.equal(tvF.to_dtype(image, torch.float32), image.float())
