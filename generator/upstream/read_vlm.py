"""Read a vision-language model's towers, mergers, position-id and placeholder methods from its pinned source.

The vlm recipe swaps parts of a Qwen-VL-like model (its towers, its ``get_rope_index``, its placeholder
masks); what it needs is read here, from the modeling module, the configuration module's sub-config
table (``sub_configs_defaults`` or ``sub_configs``) and the package's processing modules, all by path with
``ast`` (nothing is imported). The text RoPE of a VLM is the function its text attention calls, which is
not always ``apply_rotary_pos_emb``: a model may apply its own multimodal function (older Qwen2-VL-family
sources called ``apply_multimodal_rotary_pos_emb``) and keeps another (``apply_rotary_pos_emb_vision``) for
the tower, so both are read from their call sites.
"""

from __future__ import annotations

import ast
from dataclasses import replace

from modelgraft.generator.errors import UpstreamError
from modelgraft.generator.upstream.composed_contract import VISION_CONFIG, composed_differences
from modelgraft.generator.upstream.read_auto import auto_model_class, model_type_package
from modelgraft.generator.upstream.read_conversion import transposes_fused_experts
from modelgraft.generator.upstream.read_indexer import read_dsa_indexer
from modelgraft.generator.upstream.read_processors import read_processors
from modelgraft.generator.upstream.source import ModelSource, called_name, calls_in, dotted
from modelgraft.generator.upstream.structure import RopeInfo
from modelgraft.generator.upstream.vlm_contract import contract_differences
from modelgraft.generator.upstream.vlm_structure import (
    CompositionInfo,
    MergerInfo,
    MethodInfo,
    ProcessorInfo,
    TowerInfo,
    VlmInfo,
)

#: Attribute names (prefixes) under which a VLM's Model holds its vision tower.
VISION_ATTRS = ("visual", "vision_tower", "vision_model", "vision_encoder", "vision", "image_encoder")
_LANGUAGE_ATTRS = ("language_model", "text_model")
_MERGER_WORDS = ("merger", "projector", "projection", "connector", "adapter", "aligner")
_ROPE_WORDS = ("rotary", "rope")


def read_vlm(source: ModelSource, model_type: str | None) -> VlmInfo:
    """The VLM part of the report: towers, mergers, methods, compositions, processors, vision RoPE, contract."""
    model_class = _model_class(source)
    compositions = _compositions(source)
    vision = language = None
    mergers: list[MergerInfo] = []
    rope_index = placeholder = merger = image_features = None
    if model_class is not None:
        vision = _tower(source, model_class, VISION_ATTRS, compositions)
        language = _tower(source, model_class, _LANGUAGE_ATTRS, compositions)
        if vision is not None and vision.cls in _defining(source, vision).classes:
            mergers.extend(_mergers(_defining(source, vision), vision.cls, "tower"))
        mergers.extend(_mergers(source, model_class, "model"))
        rope_index = _method(source, model_class, "get_rope_index")
        placeholder = _method(source, model_class, "get_placeholder_mask")
        merger_name = _placeholder_merger(source, model_class) if placeholder is None else None
        merger = _method(source, model_class, merger_name) if merger_name else None
        image_features = _method(source, model_class, "get_image_features")
    processors = read_processors(source, model_type)
    image_only = _image_only(source, model_class, placeholder, processors)
    info = VlmInfo(
        model_class=model_class,
        model_line=source.classes[model_class].lineno if model_class else 0,
        vision=vision,
        language_model=language,
        mergers=tuple(mergers),
        rope_index=rope_index,
        placeholder_mask=placeholder,
        placeholder_merger=merger,
        image_features=image_features,
        image_tiling=TILING_FIELD in read_config_fields(source),
        image_sizes=image_features is not None and "image_sizes" in image_features.required,
        image_rows=_image_rows(source, model_class),
        zero_images_are_padding=_zero_images_are_padding(source, model_class),
        image_grid=image_features is not None and "image_grid_thw" in image_features.params,
        image_merge_sizes=image_features is not None
        and "image_grid_thw" in image_features.params
        and "image_merge_sizes" in image_features.required,
        image_patch_grid=(patch_grid := _patch_grid(source, model_class, vision, image_features)),
        patch_grid_factors=_patch_grid_factors(source, vision, mergers) if patch_grid else (),
        bidirectional_mask=_bidirectional_mask(source, model_class),
        forward_scatters=_forward_scatters(source, model_class),
        dsa_indexer=read_dsa_indexer(source),
        compositions=compositions,
        processors=processors,
        # Only a tower of this module: another package's tower keeps its rotary function in its own module.
        vision_rope=vision_rope(source, vision.cls if vision and not vision.package else None),
        image_only=image_only,
        # Both masks by one id: an image-only model has no second mask to share it.
        video_shares_image_token=_shared_placeholder_token(source, model_class) and not image_only,
        placeholder_ids=_placeholder_ids(source, model_class),
        pretrained_bases=tuple(cls for cls in source.classes if "PreTrainedModel" in source.base_names(cls)),
        language_model_reads_text_row=_reads_text_row(_defining(source, language), language.cls if language else None),
        unset_sized_fields=_unset_sized_fields(source, model_class),
        nested_vision_configs=_nested_vision_configs(source),
        # A composed VLM (no get_rope_index) registers its own sub-types through its recipe's own_types instead.
        sub_model_types=_sub_model_types(source, model_type) if rope_index is not None else (),
        hub_transposes_experts=bool(model_type)
        and transposes_fused_experts(model_type or "", root=source.sources.root),
    )
    return _with_contract(info)


def _sub_model_types(source: ModelSource, model_type: str | None) -> tuple[tuple[str, str], ...]:
    """(model_type, config class) of each sub-config class of the package's own whose ``AutoModel`` class is a
    class of this modeling module, in the table's order; never the package's own ``model_type``."""
    classes = read_sub_configs(source)
    found: dict[str, str] = {}
    for attr, (sub_type, own) in read_sub_config_types(source).items():
        config_class = classes.get(attr)
        if not own or sub_type is None or sub_type == model_type or config_class is None:
            continue
        if auto_model_class(source.sources, sub_type) in source.classes:
            found.setdefault(sub_type, config_class)
    return tuple(found.items())


def _compared_ids(source: ModelSource, model_class: str | None) -> list[str]:
    """The ``self.config.<id>`` expressions ``get_placeholder_mask`` compares ``input_ids`` with, in source order;
    where the Model has none, those its placeholder merger compares (Idefics3's ``inputs_merger``)."""
    found = source.method(model_class, "get_placeholder_mask") if model_class else None
    if found is None and model_class is not None:
        merger = _placeholder_merger(source, model_class)
        found = source.method(model_class, merger) if merger else None
    if found is None:
        return []
    compared = _ids_compared_with_input_ids(found[0])
    if compared or found[0].name != "get_placeholder_mask":
        return compared
    return _ids_passed_for_compared_params(source, model_class, found[0])


def _ids_compared_with_input_ids(func: ast.FunctionDef) -> list[str]:
    compared = [
        dotted(side)
        for node in ast.walk(func)
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "input_ids"
        for side in node.comparators
        if dotted(side).startswith("self.config.")
    ]
    return list(dict.fromkeys(compared))


def _ids_passed_for_compared_params(source: ModelSource, model_class: str | None, mask: ast.FunctionDef) -> list[str]:
    """The ``self.config.<id>`` expressions the Model's forward passes ``get_placeholder_mask`` for the parameter
    it compares ``input_ids`` with (MiniCPM-V's ``token_id``: one call per modality), in the forward's order."""
    params = [a.arg for a in mask.args.posonlyargs + mask.args.args][1:]  # without self
    compared = {
        side.id
        for node in ast.walk(mask)
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "input_ids"
        for side in node.comparators
        if isinstance(side, ast.Name) and side.id in params + [a.arg for a in mask.args.kwonlyargs]
    }
    forward = source.method(model_class, "forward") if model_class else None
    if not compared or forward is None:
        return []
    passed: list[str] = []
    for node in ast.walk(forward[0]):
        if not (isinstance(node, ast.Call) and dotted(node.func) == "self.get_placeholder_mask"):
            continue
        given = {params[i]: arg for i, arg in enumerate(node.args) if i < len(params)}
        given.update({k.arg: k.value for k in node.keywords if k.arg})
        passed.extend(dotted(given[name]) for name in sorted(compared) if name in given)
    return list(dict.fromkeys(n for n in passed if n.startswith("self.config.")))


def _placeholder_merger(source: ModelSource, model_class: str) -> str | None:
    """The method the Model's forward calls (``self.<name>(...)``) that scatters image features into placeholders
    itself: it takes ``input_ids`` and ``inputs_embeds``, compares ``input_ids`` with a ``self.config.<id>`` and
    calls ``masked_scatter`` (Idefics2's and Idefics3's ``inputs_merger``); None where the forward calls none."""
    forward = source.method(model_class, "forward")
    if forward is None:
        return None
    called = [
        node.func.attr
        for node in ast.walk(forward[0])
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and dotted(node.func.value) == "self"
    ]
    for name in dict.fromkeys(called):
        found = source.method(model_class, name) if name != "get_placeholder_mask" else None
        if found is None:
            continue
        func = found[0]
        params = {a.arg for a in func.args.posonlyargs + func.args.args + func.args.kwonlyargs}
        scatters = any(
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "masked_scatter"
            for node in ast.walk(func)
        )
        if {"input_ids", "inputs_embeds"} <= params and scatters and _ids_compared_with_input_ids(func):
            return name
    return None


def _image_only(
    source: ModelSource, model_class: str | None, placeholder: MethodInfo | None, processors: tuple[ProcessorInfo, ...]
) -> bool:
    """``get_placeholder_mask`` returns one mask, and nothing upstream takes videos: the Model's forward has no
    ``pixel_values_videos`` parameter and the package (with what the Auto tables lend it) no video processor."""
    if model_class is None or placeholder is None or placeholder.returns != 1:
        return False
    if any(p.kind == "video_processor" for p in processors):
        return False
    forward = source.method(model_class, "forward")
    if forward is None:
        return True
    args = forward[0].args
    return "pixel_values_videos" not in {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}


def _shared_placeholder_token(source: ModelSource, model_class: str | None) -> bool:
    """``get_placeholder_mask`` compares ``input_ids`` with one ``self.config.<id>`` only, for both masks."""
    return (
        len(_compared_ids(source, model_class)) == 1 and source.method(model_class, "get_placeholder_mask") is not None
    )


def _placeholder_ids(source: ModelSource, model_class: str | None) -> tuple[str, ...]:
    """The image placeholder's id, then the video's, as ``get_placeholder_mask`` compares them (by name)."""
    compared = _compared_ids(source, model_class)
    image = [c for c in compared if "image" in c]
    video = [c for c in compared if "video" in c]
    return tuple(image[:1] + video[:1]) if image else ()


def _patch_grid(
    source: ModelSource, model_class: str | None, vision: TowerInfo | None, features: MethodInfo | None
) -> str | None:
    """The parameter of ``get_image_features`` that gives each image's patch grid, ``(images, 2)`` rows of
    (height, width) in patches (MiniCPM-V's ``target_sizes``): one it requires and hands the vision tower, whose
    forward multiplies its two columns (``x[:, 0] * x[:, 1]``, the patches of each image); None where none does."""
    if model_class is None or vision is None or features is None:
        return None
    defining = _defining(source, vision)
    method = source.method(model_class, "get_image_features")
    forward = defining.local_method(vision.cls, "forward") if vision.cls in defining.classes else None
    if method is None or forward is None:
        return None
    tower_params = [a.arg for a in forward.args.posonlyargs + forward.args.args][1:]
    for call in calls_in(method[0]):
        if dotted(call.func) != f"self.{vision.attr}":
            continue
        passed = {tower_params[i]: arg for i, arg in enumerate(call.args) if i < len(tower_params)}
        passed.update({k.arg: k.value for k in call.keywords if k.arg})
        for name, value in passed.items():
            if isinstance(value, ast.Name) and value.id in features.required and _multiplies_columns(forward, name):
                return value.id
    return None


def _multiplies_columns(func: ast.FunctionDef, name: str) -> bool:
    """``func`` multiplies column 0 of ``name`` by its column 1 (``name[:, 0] * name[:, 1]``)."""

    def column(node: ast.expr) -> int | None:
        if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == name):
            return None
        index = node.slice
        if isinstance(index, ast.Tuple) and len(index.elts) == 2 and isinstance(index.elts[0], ast.Slice):
            last = index.elts[1]
            return last.value if isinstance(last, ast.Constant) and type(last.value) is int else None
        return None

    return any(
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Mult)
        and {column(node.left), column(node.right)} == {0, 1}
        for node in ast.walk(func)
    )


#: Config fields a merger divides a patch grid by, read where its ``__init__`` keeps one.
_GRID_FACTOR_ENDINGS = ("kernel_size", "merge_size")


def _patch_grid_factors(
    source: ModelSource, vision: TowerInfo | None, mergers: list[MergerInfo]
) -> tuple[tuple[str, str, str], ...]:
    """(config, field, rounds) of each factor a merger divides a patch grid by: ``config`` is the sub-config of the
    Model's config the merger is built from (``vision_config`` inside the tower, else the one it is handed, or ""
    for the Model's config itself),
    ``field`` the ``*kernel_size``/``*merge_size`` its ``__init__`` reads, ``rounds`` the config field counting how
    many times its forward merges (``range(..., self.<n>)`` over ``config.<rounds>``), or "" for once. The grid
    whose side is the product of each factor to its rounds passes every merger (MiniCPM-V's window merger, then its
    merger)."""
    found: list[tuple[str, str, str]] = []
    for merger in mergers:
        where = _defining(source, vision) if merger.place == "tower" else source
        if merger.cls is None or merger.cls not in where.classes:
            continue
        init = where.local_method(merger.cls, "__init__")
        forward = where.local_method(merger.cls, "forward")
        if init is None:
            continue
        built = _building_call(source if merger.place == "model" else where, merger.owner, merger.attr)
        handed = _config_attr(built) if built is not None else None
        config = VISION_CONFIG if merger.place == "tower" else (handed or "")
        kept: dict[str, str] = {}  # self.<attr> -> config.<field> read into it
        for node in ast.walk(init):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = dotted(node.targets[0])
                fields = [
                    n.attr
                    for n in ast.walk(node.value)
                    if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "config"
                ]
                if target.startswith("self.") and len(fields) == 1:
                    kept[target] = fields[0]
        rounds = ""
        for node in ast.walk(forward) if forward is not None else ():
            if isinstance(node, ast.Call) and dotted(node.func) == "range" and node.args:
                rounds = kept.get(dotted(node.args[-1]), rounds)
        for field in kept.values():
            if field.endswith(_GRID_FACTOR_ENDINGS):
                found.append((config, field, rounds))
    return tuple(dict.fromkeys(found))


def _reads_text_row(source: ModelSource, language_model: str | None) -> bool:
    """The language model's forward tests ``position_ids.shape[0] == 4``; True where there is no forward to read
    (a class of another module, or one the checkpoint's config picks)."""
    found = source.method(language_model, "forward") if language_model in source.classes else None
    if found is None:
        return True
    forward = found[0]
    return any(
        isinstance(node, ast.Compare)
        and dotted(node.left) == "position_ids.shape[0]"
        and any(isinstance(op, ast.Eq) for op in node.ops)
        and any(isinstance(side, ast.Constant) and side.value == 4 for side in node.comparators)
        for node in ast.walk(forward)
    )


def _with_contract(info: VlmInfo) -> VlmInfo:
    return replace(
        info, contract_differences=contract_differences(info), composed_differences=composed_differences(info)
    )


def _model_class(source: ModelSource) -> str | None:
    """The class whose ``__init__`` holds both a vision tower and a language model (the ``*Model``)."""
    found = [
        cls
        for cls in source.classes
        if _attr(source.init_assigns(cls), VISION_ATTRS) and _attr(source.init_assigns(cls), _LANGUAGE_ATTRS)
    ]
    return min(found, key=len) if found else None


def _attr(assigns: dict[str, list[ast.expr]], names: tuple[str, ...]) -> str | None:
    """The first attribute built in ``__init__`` named one of ``names`` exactly, else one starting with one."""
    for name in names:
        if name in assigns and any(isinstance(v, (ast.Call, ast.Name)) for v in assigns[name]):
            return name
    for attr, values in assigns.items():
        if attr.startswith(names) and any(isinstance(v, (ast.Call, ast.Name)) for v in values):
            return attr
    return None


def _building_call(source: ModelSource, owner: str, attr: str) -> ast.Call | None:
    """The call that builds ``self.<attr>``: assigned directly, or through a local (gemma3's ``language_model``)."""
    for value in source.init_assigns(owner)[attr]:
        if isinstance(value, ast.Call):
            return value
        if isinstance(value, ast.Name):
            init = source.local_method(owner, "__init__")
            for node in ast.walk(init) if init is not None else ():
                if (
                    isinstance(node, ast.Assign)
                    and isinstance(node.value, ast.Call)
                    and any(isinstance(t, ast.Name) and t.id == value.id for t in node.targets)
                ):
                    return node.value
    return None


def _tower(
    source: ModelSource, owner: str, names: tuple[str, ...], compositions: tuple[CompositionInfo, ...]
) -> TowerInfo | None:
    assigns = source.init_assigns(owner)
    attr = _attr(assigns, names)
    if attr is None:
        return None
    call = _building_call(source, owner, attr)
    if call is None:
        return TowerInfo(attr=attr, cls=None, built_by="a value not built in __init__")
    config_attr = _config_attr(call)
    func = call.func
    built_by = f"{dotted(func)}(...)"
    cls: str | None = None
    package: str | None = None
    if isinstance(func, ast.Attribute) and func.attr in ("_from_config", "from_config"):
        target = dotted(func.value)
        if target in source.classes:
            cls = target
        else:
            composed = [c for c in compositions if c.owner == owner and c.attr == attr]
            cls = composed[0].builds if composed else None
            if cls is None and composed and composed[0].model_type is not None and not composed[0].own:
                cls, package = _other_package_class(source, composed[0].model_type)
    elif isinstance(func, ast.Name) and func.id in source.classes:
        cls = func.id
    defining = _package_source(source, package) if package else source
    line = defining.classes[cls].lineno if cls in defining.classes else 0
    return TowerInfo(
        attr=attr,
        cls=cls,
        line=line,
        built_by=built_by,
        config_attr=config_attr,
        patch_weight=_patch_weight(defining, cls) if cls in defining.classes else None,
        spatial_merge_size=cls in defining.classes and "spatial_merge_size" in defining.init_assigns(cls),
        package=package,
        patch_input=_patch_input(defining, cls) if cls in defining.classes else "rows",
        position_merge=_position_merge(defining, cls) if cls in defining.classes else None,
    )


def _other_package_class(source: ModelSource, model_type: str) -> tuple[str | None, str | None]:
    """(class, package) ``AutoModel`` builds for ``model_type`` where another package's modeling module defines
    it (``qwen3_vl_vision``: ``Qwen3VLVisionModel`` of qwen3_vl); (None, None) when it has none there."""
    cls = auto_model_class(source.sources, model_type)
    package = model_type_package(source.sources, model_type)
    if cls is None or package == source.model:
        return None, None
    try:
        other = _package_source(source, package)
    except UpstreamError:
        return None, None
    return (cls, package) if cls in other.classes else (None, None)


def _package_source(source: ModelSource, package: str) -> ModelSource:
    """The modeling module of another model package, parsed through the same cache as ``source``."""
    module = f"transformers.models.{package}.modeling_{package}"
    return ModelSource(model=package, index=source.sources.get(module), sources=source.sources)


def _defining(source: ModelSource, tower: TowerInfo | None) -> ModelSource:
    """The modeling module that defines ``tower``'s class: this one, or the other package's it comes from."""
    return _package_source(source, tower.package) if tower is not None and tower.package else source


#: Module attributes that embed the processor's patch rows, and the torch layers that do it.
_PATCH_WORDS = ("patch_embed",)
_PATCH_LAYERS = ("nn.Conv3d", "nn.Conv2d", "nn.Linear")


def _patch_weight(source: ModelSource, tower: str) -> str | None:
    """``self.patch_embed.proj.weight``: the weight of the first patch-embedding layer inside ``tower``."""
    found = _patch_layer(source, tower)
    return f"self.{'.'.join(found[1])}.weight" if found else None


def _patch_layer(source: ModelSource, tower: str) -> tuple[str, tuple[str, ...]] | None:
    """(the class holding it, the attribute path from ``tower``) of the tower's first patch-embedding layer.

    Looked for one or two attributes deep (the tower's ``patch_embed``, or its ``embeddings`` holding a
    ``patch_embedding``), then three (PaddleOCR-VL's tower wraps a transformer whose ``embeddings`` hold it): an
    attribute of the path names a patch embedding and the layer is a torch ``Conv3d``, ``Conv2d`` or ``Linear``.
    The shallower search runs to its end first, so a deeper layer never shadows one a tower has closer by.
    """
    for depth in (2, 3):
        found = _patch_layer_within(source, tower, (), depth)
        if found is not None:
            return found
    return None


def _patch_layer_within(
    source: ModelSource, cls: str, path: tuple[str, ...], depth: int
) -> tuple[str, tuple[str, ...]] | None:
    for attr in source.init_assigns(cls):
        inner_path = (*path, attr)
        named = any(word in part for part in inner_path for word in _PATCH_WORDS)
        if named and _torch_layer(source, cls, attr):
            return cls, inner_path
        if len(inner_path) < depth:
            for inner in source.instantiated_classes(cls, attr):
                found = _patch_layer_within(source, inner, inner_path, depth)
                if found is not None:
                    return found
    return None


def _patch_input(source: ModelSource, tower: str) -> str:
    """How the tower's patch embedding takes the processor's patches: "images" where the forward of the class
    holding the layer first unpacks its input's shape into five names, ``(batch, patches, channels, height,
    width)`` (PaddleOCR-VL's ``Conv2d`` over each patch as a small image); else "rows", one flat row per patch
    (Qwen-VL's; HY-V4-VL's, which unpacks two sizes first and reshapes the rows into small images itself)."""
    found = _patch_layer(source, tower)
    forward = source.local_method(found[0], "forward") if found else None
    if forward is None:
        return "rows"
    params = [a.arg for a in forward.args.posonlyargs + forward.args.args if a.arg != "self"]
    unpackings = sorted(
        (
            node
            for node in ast.walk(forward)
            if isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Tuple)
            and params
            and dotted(node.value) == f"{params[0]}.shape"
        ),
        key=lambda node: (node.lineno, node.col_offset),
    )
    # The first unpacking is of the input as given: HY-V4-VL's takes two sizes (flat rows) and reshapes them
    # into the five it unpacks after.
    return "images" if unpackings and len(unpackings[0].targets[0].elts) == 5 else "rows"


def _position_merge(source: ModelSource, tower: str) -> int | None:
    """The merge size the tower lays its rotary positions out by where it passes a constant to transformers'
    ``get_vision_position_ids`` (PaddleOCR-VL's ``1``: it merges patches in the projector, after the tower); None
    where it passes its own merge size (``self.spatial_merge_size``, the Qwen-VL towers)."""
    for cls in _reachable(source, tower):
        forward = source.local_method(cls, "forward")
        for call in calls_in(forward) if forward is not None else ():
            if isinstance(call.func, ast.Name) and call.func.id == "get_vision_position_ids" and len(call.args) > 1:
                merge = call.args[1]
                if isinstance(merge, ast.Constant) and type(merge.value) is int:
                    return merge.value
                return None
    return None


def _torch_layer(source: ModelSource, cls: str, attr: str) -> bool:
    return any(
        dotted(call.func) in _PATCH_LAYERS for value in source.init_assigns(cls)[attr] for call in calls_in(value)
    )


def _config_attr(call: ast.Call) -> str | None:
    """``vision_config`` for ``X(config.vision_config)``; None when the argument is not ``config.<attr>``."""
    for arg in [*call.args, *(k.value for k in call.keywords)]:
        if isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id == "config":
            return arg.attr
    return None


def _mergers(source: ModelSource, owner: str, place: str) -> list[MergerInfo]:
    found = []
    for attr, values in source.init_assigns(owner).items():
        if not any(word in attr for word in _MERGER_WORDS):
            continue
        classes = source.instantiated_classes(owner, attr)
        if not classes and not any(isinstance(v, ast.Call) for v in values):
            continue
        cls = classes[0] if classes else None
        found.append(
            MergerInfo(
                owner=owner,
                attr=attr,
                cls=cls,
                line=source.classes[cls].lineno if cls else 0,
                place=place,
                deepstack=attr.startswith("deepstack"),
            )
        )
    return found


def _method(source: ModelSource, cls: str, name: str) -> MethodInfo | None:
    found = source.method(cls, name)
    if found is None:
        return None
    func, inherited_from = found
    args = func.args
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    params = [a.arg for a in positional] + [a.arg for a in args.kwonlyargs]
    required = [a.arg for a, d in zip(positional, defaults, strict=True) if d is None]
    required += [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None]
    returns = [
        len(n.value.elts) if isinstance(n.value, ast.Tuple) else 1
        for n in ast.walk(func)
        if isinstance(n, ast.Return) and n.value is not None
    ]
    return MethodInfo(
        name=name,
        owner=inherited_from or cls,
        line=func.lineno,
        params=tuple(p for p in params if p != "self"),
        required=tuple(p for p in required if p != "self"),
        var_keyword=args.kwarg is not None,
        returns=max(returns) if returns and len(set(returns)) == 1 else (0 if not returns else -1),
    )


def _compositions(source: ModelSource) -> tuple[CompositionInfo, ...]:
    """Every ``self.<attr> = AutoModel.from_config(config.<sub>)`` of the module, with the class it builds."""
    found: list[CompositionInfo] = []
    sub_configs: dict[str, str] | None = None
    sub_types: dict[str, tuple[str | None, bool]] = {}
    for cls in source.classes:
        for attr, values in source.init_assigns(cls).items():
            built = _building_call(source, cls, attr)
            calls = [c for v in values for c in calls_in(v)] + ([built] if built is not None else [])
            for call in dict.fromkeys(c for c in calls if _is_auto_from_config(c)):
                config_attr = _config_attr(call)
                if config_attr is None:
                    continue
                if sub_configs is None:
                    sub_configs = read_sub_configs(source)
                    sub_types = read_sub_config_types(source)
                config_class = sub_configs.get(config_attr)
                model_type, own = sub_types.get(config_attr, (None, False))
                found.append(
                    CompositionInfo(
                        owner=cls,
                        attr=attr,
                        config_attr=config_attr,
                        config_class=config_class,
                        builds=_class_for_config(source, config_class),
                        model_type=model_type,
                        own=own,
                    )
                )
    return tuple(found)


def _is_auto_from_config(call: ast.Call) -> bool:
    """``AutoModel.from_config(...)`` (or another ``AutoModel*`` factory's)."""
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "from_config"
        and isinstance(func.value, ast.Name)
        and func.value.id.startswith("AutoModel")
    )


#: Class attributes of a composite config that map each sub-config attribute to its config: ``sub_configs``
#: (a class each), and ``sub_configs_defaults``, which supersedes it (a class or a ``SubConfigSpec(...)`` each).
_SUB_CONFIG_TABLES = ("sub_configs_defaults", "sub_configs")


def _class_assigns(node: ast.ClassDef) -> dict[str, ast.expr]:
    """The class-level ``name = value`` (and ``name: T = value``) statements of a class body."""
    found: dict[str, ast.expr] = {}
    for stmt in node.body:
        if isinstance(stmt, ast.Assign):
            found.update({t.id: stmt.value for t in stmt.targets if isinstance(t, ast.Name)})
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            found[stmt.target.id] = stmt.value
    return found


def _sub_config_table(source: ModelSource) -> tuple[dict[str, ast.ClassDef], ast.Dict | None]:
    """The configuration module's classes, and the sub-config table of its first class declaring one."""
    module = f"transformers.models.{source.model}.configuration_{source.model}"
    try:
        index = source.sources.get(module)
    except UpstreamError:
        return {}, None
    classes = {node.name: node for node in index.tree.body if isinstance(node, ast.ClassDef)}
    for node in classes.values():
        assigns = _class_assigns(node)
        for name in _SUB_CONFIG_TABLES:
            if isinstance(assigns.get(name), ast.Dict):
                return classes, assigns[name]  # type: ignore[return-value]
    return classes, None


def _table_entries(table: ast.Dict | None) -> list[tuple[str, ast.expr]]:
    if table is None:
        return []
    return [
        (k.value, v)
        for k, v in zip(table.keys, table.values, strict=True)
        if isinstance(k, ast.Constant) and isinstance(k.value, str)
    ]


#: The config field of models that tile their images on a grid of the tower's image size (LLaVA-NeXT's anyres).
TILING_FIELD = "image_grid_pinpoints"


def read_config_fields(source: ModelSource) -> frozenset[str]:
    """The fields (class-level names) of the configuration module's class that holds the sub-config table."""
    classes, table = _sub_config_table(source)
    for node in classes.values():
        assigns = _class_assigns(node)
        if table is not None and any(assigns.get(name) is table for name in _SUB_CONFIG_TABLES):
            fields = {
                stmt.target.id
                for stmt in node.body
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
            }
            return frozenset(fields | set(assigns))
    return frozenset()


def _unset_sized_fields(source: ModelSource, model_class: str | None) -> tuple[str, ...]:
    """The config fields declared ``= None`` in the configuration class holding the sub-config table that the
    Model's ``__init__`` takes the ``len`` of (``len(config.deepstack_layer_map)``), in source order."""
    found = source.method(model_class, "__init__") if model_class else None
    classes, table = _sub_config_table(source)
    if found is None or table is None:
        return ()
    unset: set[str] = set()
    for node in classes.values():
        assigns = _class_assigns(node)
        if any(assigns.get(name) is table for name in _SUB_CONFIG_TABLES):
            unset = {
                name for name, value in assigns.items() if isinstance(value, ast.Constant) and value.value is None
            }
    sized = [
        call.args[0].attr
        for call in ast.walk(found[0])
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id == "len"
        and len(call.args) == 1
        and isinstance(call.args[0], ast.Attribute)
        and dotted(call.args[0].value) == "config"
        and call.args[0].attr in unset
    ]
    return tuple(dict.fromkeys(sized))


def _forward_scatters(source: ModelSource, model_class: str | None) -> bool:
    """The Model's forward calls ``self.get_placeholder_mask`` itself, or a placeholder merger that scatters the
    features (Idefics3's ``inputs_merger``; True where there is no forward to read)."""
    found = source.method(model_class, "forward") if model_class else None
    if model_class is None or found is None:
        return True
    if source.method(model_class, "get_placeholder_mask") is None:
        return _placeholder_merger(source, model_class) is not None
    return any(
        isinstance(node, ast.Call) and dotted(node.func) == "self.get_placeholder_mask" for node in ast.walk(found[0])
    )


#: Mask-builder options that let tokens attend both ways (an image block, a prompt prefix).
_BIDIRECTIONAL_MASK_KEYS = ("block_sequence_ids", "or_mask_function")


def _bidirectional_mask(source: ModelSource, model_class: str | None) -> bool:
    """The Model's forward hands the mask builder a block or an or-mask (``mask_kwargs["block_sequence_ids"]``,
    ``or_mask_function=...``): some tokens attend both ways (PaliGemma's prefix, Gemma3's image tokens)."""
    found = source.method(model_class, "forward") if model_class else None
    if found is None:
        return False
    for node in ast.walk(found[0]):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            if node.slice.value in _BIDIRECTIONAL_MASK_KEYS:
                return True
        if isinstance(node, ast.keyword) and node.arg in _BIDIRECTIONAL_MASK_KEYS:
            return True
    return False


def _image_rows(source: ModelSource, model_class: str | None) -> bool:
    """``get_image_features`` unpacks ``pixel_values.shape`` into five names: its images come as a row per sample,
    ``(batch, images, channels, height, width)`` (SmolVLM's)."""
    found = source.method(model_class, "get_image_features") if model_class else None
    if found is None:
        return False
    return any(
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Tuple)
        and len(node.targets[0].elts) == 5
        and dotted(node.value) == "pixel_values.shape"
        for node in ast.walk(found[0])
    )


def _zero_images_are_padding(source: ModelSource, model_class: str | None) -> bool:
    """``get_image_features`` compares ``pixel_values == 0.0``: it finds (and drops) the all-zero images a row of
    fewer images is padded with (Idefics3's ``real_images_inds``)."""
    found = source.method(model_class, "get_image_features") if model_class else None
    if found is None:
        return False
    return any(
        isinstance(node, ast.Compare)
        and dotted(node.left) == "pixel_values"
        and any(isinstance(op, ast.Eq) for op in node.ops)
        and any(isinstance(side, ast.Constant) and side.value == 0 for side in node.comparators)
        for node in ast.walk(found[0])
    )


def _nested_vision_configs(source: ModelSource) -> tuple[str, ...]:
    """The sub-configs the vision config class declares in its own table (deepseek_ocr2's ``sam_config`` and
    ``encoder_config``), where the package defines that class."""
    classes, _ = _sub_config_table(source)
    tables = {name: _own_table(node) for name, node in classes.items()}
    for table in tables.values():
        entry = dict(_table_entries(table)).get("vision_config")
        if entry is not None:
            return tuple(attr for attr, _ in _table_entries(tables.get(_sub_config_class(entry) or "")))
    return ()


def _own_table(node: ast.ClassDef) -> ast.Dict | None:
    assigns = _class_assigns(node)
    return next((assigns[n] for n in _SUB_CONFIG_TABLES if isinstance(assigns.get(n), ast.Dict)), None)  # type: ignore[return-value]


def read_sub_configs(source: ModelSource) -> dict[str, str]:
    """The sub-config table of the package's configuration module (its first class declaring one): attr ->
    class (``AutoConfig`` where the checkpoint's model_type picks it)."""
    _, table = _sub_config_table(source)
    return {
        attr: config_class
        for attr, value in _table_entries(table)
        if (config_class := _sub_config_class(value)) is not None
    }


def read_sub_config_types(source: ModelSource) -> dict[str, tuple[str | None, bool]]:
    """attr -> (the model_type a default config builds there, whether the package defines that config class).

    A ``SubConfigSpec(..., model_type="clip_vision_model")`` names it; a config class of the package's own
    configuration module names it as its ``model_type`` class attribute.
    """
    classes, table = _sub_config_table(source)
    declared = {
        name: value.value
        for name, node in classes.items()
        if isinstance(value := _class_assigns(node).get("model_type"), ast.Constant) and isinstance(value.value, str)
    }
    found: dict[str, tuple[str | None, bool]] = {}
    for attr, value in _table_entries(table):
        model_type = _spec_model_type(value) or declared.get(_sub_config_class(value) or "")
        found[attr] = (model_type, model_type is not None and model_type in declared.values())
    return found


def _spec_model_type(value: ast.expr) -> str | None:
    """``SubConfigSpec(..., model_type="llama")``'s model type; None for a bare class or a spec without one."""
    if isinstance(value, ast.Call):
        for kw in value.keywords:
            if kw.arg == "model_type" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                return kw.value.value
    return None


def _sub_config_class(value: ast.expr) -> str | None:
    """``X`` for ``X``, and for a spec call ``Spec(config_class=X, ...)`` or ``Spec(X, ...)``."""
    if isinstance(value, (ast.Name, ast.Attribute)):
        return dotted(value)
    if isinstance(value, ast.Call):
        for kw in value.keywords:
            if kw.arg == "config_class":
                return _sub_config_class(kw.value)
        if value.args:
            return _sub_config_class(value.args[0])
    return None


def _class_for_config(source: ModelSource, config_class: str | None) -> str | None:
    """The ``*Model`` class of the module annotated ``config: <config_class>`` (what AutoModel maps it to)."""
    if config_class is None or config_class == "AutoConfig":
        return None
    for cls, node in source.classes.items():
        if not cls.endswith("Model") or cls.endswith("PreTrainedModel"):
            continue
        for stmt in node.body:
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and stmt.target.id == "config"
                and dotted(stmt.annotation) == config_class
            ):
                return cls
    return None


def text_rope_function(source: ModelSource, decoder_layer: str | None) -> ast.FunctionDef | None:
    """The module-level rotary function the text attention (the decoder layer's ``self_attn``) calls."""
    if decoder_layer is None:
        return None
    for attention in source.instantiated_classes(decoder_layer, "self_attn"):
        found = _rope_call(source, attention)
        if found is not None:
            return found
    return None


def vision_rope(source: ModelSource, tower: str | None) -> RopeInfo | None:
    """The rotary function the vision tower's attention calls, reported as the vision RoPE."""
    if tower is None:
        return None
    for cls in _reachable(source, tower):
        func = _rope_call(source, cls)
        if func is not None:
            return RopeInfo(
                kind="function",
                name=func.name,
                line=func.lineno,
                params=_params(func),
                formulation="unknown",
                reason="the vision tower's RoPE (the rope_vision slot), not the text one",
            )
    return None


def multimodal_rope(func: ast.FunctionDef) -> RopeInfo:
    """The text RoPE of a VLM whose attention applies a function other than ``apply_rotary_pos_emb``."""
    params = _params(func)
    what = (
        "multimodal RoPE: cos/sin split by mrope_section over temporal, height and width"
        if "mrope_section" in params
        else "not apply_rotary_pos_emb"
    )
    return RopeInfo(
        kind="function",
        name=func.name,
        line=func.lineno,
        params=params,
        formulation="unknown",
        reason=f"{func.name} (line {func.lineno}) is the text attention's RoPE: {what}",
    )


def _rope_call(source: ModelSource, cls: str) -> ast.FunctionDef | None:
    forward = source.local_method(cls, "forward")
    if forward is None:
        return None
    for call in calls_in(forward):
        name = called_name(call)
        if isinstance(call.func, ast.Name) and name in source.functions and any(w in name for w in _ROPE_WORDS):
            return source.functions[name]
    return None


def _reachable(source: ModelSource, start: str) -> list[str]:
    seen = [start]
    todo = [start]
    while todo:
        cls = todo.pop(0)
        for attr in source.init_assigns(cls):
            for name in source.instantiated_classes(cls, attr):
                if name not in seen:
                    seen.append(name)
                    todo.append(name)
    return seen


def _params(func: ast.FunctionDef) -> tuple[str, ...]:
    args = func.args
    return tuple(a.arg for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg != "self")
