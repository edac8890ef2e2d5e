"""The model categories (docs/design.md, "Model categories"): one typed table, the one place they are defined.

Everything that branches on a category reads it from here: the upstream reader (which category a structure
is, :func:`category_for`), the scaffold's fit and the rendering of its recipe call
(``modelgraft.generator.recipes.fit``, ``render``), the questionnaire's conditions and the template
(``copier.yml`` and ``template/``, through the Jinja helpers of ``modelgraft.scaffold.jinja_extension``) and
``scaffold-survey`` (its ``--category`` choices, labels and targets). Adding a category is adding a row;
what the row cannot say (a recipe, a fit, a test suite) is written where it lives. The functions below read
:data:`CATEGORIES` when they are called, and so does every user of the table: none keeps a copy.

Pure data: this module imports nothing, so the survey, which stays light, can read it too.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CATEGORIES",
    "OUT_OF_CATEGORY",
    "Category",
    "Suite",
    "category",
    "category_for",
    "category_names",
    "lookup",
    "names",
]

#: The category of a model no scaffold handles (encoders, encoder-decoders, recurrent or state-space mixers).
OUT_OF_CATEGORY = "out_of_category"


@dataclass(frozen=True)
class Suite:
    """The parity suite of ``modelgraft.models.testing`` a scaffold's tests run: ``from <module> import <model>,
    <suite>``, a ``<model>(...)`` declaration and a test class deriving from ``<suite>``."""

    #: The module under ``modelgraft.models.testing`` ("dense_suite", "scaffold_vlm").
    module: str
    #: The declaration class of the model under test ("DenseModel", "ScaffoldVlmMoe").
    model: str
    #: The suite class the test class derives from ("DenseParitySuite", "ScaffoldVlmMoeParitySuite").
    suite: str
    #: How the test module's docstring names it ("the dense suite", "the VLM-MoE suite").
    title: str


@dataclass(frozen=True)
class Category:
    """One model category and everything that is decided by it alone."""

    #: The answer of Copier's ``category`` question and what the reader reports ("vlm_moe").
    name: str
    #: The recipe of ``modelgraft.generator.recipes`` a scaffold's config calls ("moe_text"); "" for no scaffold.
    recipe: str
    #: The recipe a Gated DeltaNet hybrid of this category calls instead (generator/recipes/hybrid.py); "" for none.
    hybrid_recipe: str
    #: The model routes to experts: the MoE answers and recipe arguments (experts, router, aux loss) and a
    #: checkpoint converter for the hub's per-expert weights.
    experts: bool
    #: The towers beside the text decoder, from which the reader tells the category: () for a text model,
    #: ("vision",) for a VLM, ("audio", "vision") for an Omni model's thinker.
    towers: tuple[str, ...]
    #: The text category whose fit and recipe arguments the text decoder gets (itself for a text category).
    text: str
    #: The suite the scaffold's tests run; None for no scaffold.
    suite: Suite | None
    #: How a scaffold's config docstring names it ("MoE text", "Omni, thinker only").
    kind: str
    #: How ``scaffold-survey``'s tables name it ("MoE", "VLM + MoE").
    label: str
    #: The pass rate ``scaffold-survey`` measures the scaffold against (docs/scaffolding.md, "How far the
    #: scaffold reaches"); None for no target.
    target: float | None = None
    #: The recipe a short-convolution hybrid of this category calls instead (generator/recipes/hybrid.py); "" for
    #: none.
    short_convolution_recipe: str = ""

    @property
    def scaffolded(self) -> bool:
        """A scaffold exists: Copier renders a recipe call and a test suite for this category."""
        return bool(self.recipe)

    @property
    def omni(self) -> bool:
        """An audio tower: a Qwen-Omni-like thinker (the omni fit, reader and suite), vision tower or not."""
        return "audio" in self.towers

    @property
    def vlm(self) -> bool:
        """A vision tower alone: a Qwen-VL-like model (the vlm fit, reader and suite)."""
        return self.towers == ("vision",)


CATEGORIES: tuple[Category, ...] = (
    Category(
        "dense",
        recipe="dense_text",
        hybrid_recipe="gated_delta_net_text",
        short_convolution_recipe="short_convolution_text",
        experts=False,
        towers=(),
        text="dense",
        suite=Suite("dense_suite", "DenseModel", "DenseParitySuite", "the dense suite"),
        kind="dense text",
        label="dense",
        target=0.85,
    ),
    Category(
        "moe",
        recipe="moe_text",
        hybrid_recipe="gated_delta_net_moe_text",
        short_convolution_recipe="short_convolution_moe_text",
        experts=True,
        towers=(),
        text="moe",
        suite=Suite("moe_suite", "MoeModel", "MoeParitySuite", "the MoE suite"),
        kind="MoE text",
        label="MoE",
        target=0.70,
    ),
    Category(
        "vlm",
        recipe="vlm",
        hybrid_recipe="",
        experts=False,
        towers=("vision",),
        text="dense",
        suite=Suite("scaffold_vlm", "ScaffoldVlm", "ScaffoldVlmParitySuite", "the VLM suite"),
        kind="VLM",
        label="VLM",
    ),
    Category(
        "vlm_moe",
        recipe="vlm_moe",
        hybrid_recipe="",
        experts=True,
        towers=("vision",),
        text="moe",
        suite=Suite("scaffold_vlm", "ScaffoldVlmMoe", "ScaffoldVlmMoeParitySuite", "the VLM-MoE suite"),
        kind="VLM + MoE",
        label="VLM + MoE",
    ),
    Category(
        "omni",
        recipe="omni",
        hybrid_recipe="",
        experts=False,
        towers=("audio", "vision"),
        text="dense",
        suite=Suite("scaffold_omni", "ScaffoldOmni", "ScaffoldOmniParitySuite", "the Omni suite"),
        kind="Omni, thinker only",
        label="omni",
    ),
    Category(
        "omni_moe",
        recipe="omni_moe",
        hybrid_recipe="",
        experts=True,
        towers=("audio", "vision"),
        text="moe",
        suite=Suite("scaffold_omni", "ScaffoldOmniMoe", "ScaffoldOmniMoeParitySuite", "the Omni-MoE suite"),
        kind="Omni + MoE, thinker only",
        label="omni moe",
    ),
    Category(
        OUT_OF_CATEGORY,
        recipe="",
        hybrid_recipe="",
        experts=False,
        towers=(),
        text="",
        suite=None,
        kind="out of category",
        label="out of category",
    ),
)


def category_names() -> tuple[str, ...]:
    """Every category's name, in the table's order (the reader's categories)."""
    return tuple(entry.name for entry in CATEGORIES)


def lookup(name: str) -> Category | None:
    """The category called ``name``, or None for a name the table lacks (an answer to check)."""
    return next((entry for entry in CATEGORIES if entry.name == name), None)


def category(name: str) -> Category:
    """The category called ``name``; a :class:`KeyError` naming the known ones for any other name."""
    found = lookup(name)
    if found is None:
        raise KeyError(f"{name!r} is not a model category ({', '.join(category_names())})")
    return found


def names(**where: object) -> tuple[str, ...]:
    """The names of the categories whose attributes equal ``where``, in the table's order:
    ``names(experts=True)``, ``names(scaffolded=True, towers=())``."""
    return tuple(entry.name for entry in CATEGORIES if all(getattr(entry, k) == v for k, v in where.items()))


def category_for(*, experts: bool, towers: tuple[str, ...] | frozenset[str] = ()) -> Category:
    """The scaffolded category of a model that routes to experts (or not) and builds ``towers``: the one with the
    fewest towers that holds them all (an audio tower alone, or with a vision tower, is an Omni model's)."""
    found = set(towers)
    fitting = [c for c in CATEGORIES if c.scaffolded and c.experts == experts and found <= set(c.towers)]
    if not fitting:
        raise KeyError(f"no category routes to experts={experts} with towers {sorted(found)}")
    return min(fitting, key=lambda entry: len(entry.towers))
