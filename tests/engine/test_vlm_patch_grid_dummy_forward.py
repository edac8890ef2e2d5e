"""vlm_composed_dummy_forward's patch_grid option, rendered and run on a toy Model: a get_image_features that takes
each image's (height, width) in patches (MiniCPM-V's target_sizes) gets one blank square image whose side is the
product of the mergers' factors, each to its rounds (docs/scaffolding.md, "The composed-VLM contract")."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from modelgraft.generator.dsl.patches import SnippetRef
from modelgraft.generator.snippets import environment, render

#: The recipe's other options, off.
PLAIN = {"tower": "vision_tower", "tiles": False, "image_sizes": False}
FACTORS = [["vision_config", "window_kernel_size", ""], ["", "merge_kernel_size", "merger_times"]]


def _dummy_forward(**variables: Any) -> Any:
    ref = SnippetRef(name="vlm_composed_dummy_forward", variables={**PLAIN, **variables})
    text, _ = render(ref, None, environment())
    namespace: dict[str, Any] = {"torch": torch}
    exec(text, namespace)  # noqa: S102 - the rendered method, run on the toy below
    return namespace["dummy_forward"]


class ToyModel(nn.Module):
    """Records what get_image_features is handed; its merger needs a grid divisible by window x merge^rounds."""

    def __init__(self, merger_times: int) -> None:
        super().__init__()
        vision = SimpleNamespace(image_size=8, patch_size=[2, 2], num_channels=3, window_kernel_size=(2, 2))
        self.config = SimpleNamespace(vision_config=vision, merge_kernel_size=[2, 2], merger_times=merger_times)
        self.vision_tower = nn.Conv2d(3, 4, kernel_size=2, stride=2)
        self.seen: dict[str, Any] = {}

    def get_image_features(self, pixel_values: Any, target_sizes: Any, return_dict: bool = True) -> Any:
        self.seen = {"pixel_values": pixel_values, "target_sizes": target_sizes}
        patches = self.vision_tower(pixel_values).flatten(2).transpose(1, 2)[0]
        height, width = (int(v) for v in target_sizes[0])
        assert patches.shape[0] == height * width
        side = 2 * 2**self.config.merger_times
        assert height % side == 0 and width % side == 0
        return SimpleNamespace(pooler_output=[patches[: (height // side) * (width // side)]])


def test_the_blank_grid_is_the_product_of_the_factors_each_to_its_rounds() -> None:
    forward = _dummy_forward(patch_grid="target_sizes", grid_factors=FACTORS)
    for rounds, side in ((1, 4), (2, 8)):
        model = ToyModel(rounds)
        total = forward(model)
        assert total.item() == 0.0
        assert model.seen["target_sizes"].tolist() == [[side, side]]
        assert tuple(model.seen["pixel_values"].shape) == (1, 3, side * 2, side * 2)


def test_without_patch_grid_the_blank_image_is_the_tower_s_image_size() -> None:
    text, _ = render(SnippetRef(name="vlm_composed_dummy_forward", variables=PLAIN), None, environment())
    assert "target_sizes" not in text and "size = vision_config.image_size" in text


def test_the_grid_s_parameter_is_named_as_upstream_names_it() -> None:
    ref = SnippetRef(
        name="vlm_composed_dummy_forward",
        variables={**PLAIN, "patch_grid": "patch_hw", "grid_factors": FACTORS[:1]},
    )
    text, _ = render(ref, None, environment())
    assert "patch_hw=patch_hw" in text and "merger_times" not in text
