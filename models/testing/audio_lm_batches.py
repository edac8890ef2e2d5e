"""A composed audio language model's tiny config, processor and batches, derived from its own classes at run time.

A composed audio LM (GLM-ASR, AudioFlamingo3, Qwen3-ASR, MOSS-Transcribe-Diarize, MusicFlamingo) builds
``audio_tower`` and ``language_model`` from its sub-configs with ``AutoModel.from_config``, projects the tower's
output with its own ``multi_modal_projector`` and scatters the result into the placeholders
(``config.audio_token_id``) its processor wrote, one per feature row. Nothing here names such a model:
:class:`AudioLmBatches` reads what it needs from the top-level config class and the processor class, by the
rules the VLM and Omni scaffolds use (``modelgraft.models.testing.scaffold_vlm``, ``scaffold_omni``):

- the text config: the text scaffolds' tiny sizes for the default text model type (:func:`tiny_text_sizes`), its
  vocabulary the tiny tokenizer's, RoPE sections only where the default text config has them;
- the audio config: :data:`~modelgraft.models.testing.scaffold_omni.AUDIO_SIZES` for the attributes the audio
  config class declares, under Whisper's names or the common ones (:data:`WHISPER_NAMES`); the FFN width the same
  multiple of the tower's width as in the default (GLM-ASR's projector reshapes four frames into one FFN-wide
  row); a chunk size (``n_window``) the processor counts its placeholders with is the tower's too; and a tower
  that holds one learnt position per frame of a fixed window (``max_source_positions``, Whisper's 1500 for 30 s)
  holds as many for the tiny window as the default holds per second;
- the special ids: ``audio_token_id`` and every other ``*_token_id`` the config declares whose token the processor
  writes under the same name (MusicFlamingo's ``audio_bos_token``), as the tiny tokenizer's ids; ``pad``/``bos``/
  ``eos`` the tokenizer's own, and any other (Qwen3-ASR's ``timestamp_token_id``) a token of its own, so no id
  lies past the tiny vocabulary;
- the processor: the model's own class over a word-level tokenizer holding every ``*_token`` string the processor
  takes or reads from its tokenizer (Qwen3-ASR's ``tokenizer.audio_token``), and the feature extractor
  transformers registers for the model type (else for the package its audio tower comes from: MusicFlamingo's
  is AudioFlamingo3's), at the tiny mel bins; options the config also declares (MOSS's ``audio_merge_size``) are
  the config's;
- the padded window: feature extractors pad each clip to a window of ``chunk_length`` seconds, which some towers
  take only at certain lengths (GLM-ASR merges frames in fours after a stride-2 conv, so 1 s does not divide).
  The shortest window of :data:`WINDOW_SECONDS` on which upstream's own model takes the processor's batch is
  the one used: the model raising on a placeholder count that differs from its feature rows is the check.

Batches are the processor's own outputs with labels (padding and audio placeholders ignored). A processor that
refuses a batch with fewer clips than rows (GLM-ASR's "must match 1:1") gets its audio rows alone; text-only rows
are tokenized apart and padded onto the side the processor pads.
"""

from __future__ import annotations

import copy
import importlib
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch
from transformers import PreTrainedConfig, PreTrainedTokenizerFast, ProcessorMixin, WhisperFeatureExtractor
from transformers.models.auto.feature_extraction_auto import (
    FEATURE_EXTRACTOR_MAPPING_NAMES,
    feature_extractor_class_from_name,
)
from transformers.models.auto.modeling_auto import MODEL_MAPPING

from modelgraft.models.processors import build_processor
from modelgraft.models.testing.batches import IGNORE_INDEX
from modelgraft.models.testing.omni_processor import (
    SAMPLING_RATE,
    synthetic_audio,
    tiny_omni_tokenizer,
    whisper_features,
)
from modelgraft.models.testing.scaffold_omni import AUDIO_SIZES, processor_default, tiny_audio_sizes
from modelgraft.models.testing.scaffold_vlm import _fields, sub_config_class, tiny_text_sizes
from modelgraft.models.testing.seed import seed_everything
from modelgraft.models.testing.vlm_processor import read_tokenizer_attributes

__all__ = [
    "CLIP_SECONDS",
    "LAYOUTS",
    "WINDOW_SECONDS",
    "AudioLmBatches",
    "audio_lm_classes",
    "feature_extractor_class",
    "tiny_audio_lm_audio_sizes",
]

#: The batch layouts :meth:`AudioLmBatches.batch` makes.
LAYOUTS = ("audio", "text", "mixed")
#: The two audio rows' clips: different lengths, both shorter than the shortest window (a longer clip is cut into
#: several windows, and MOSS writes second-count words into a span of 2 s or more), and no shorter than Qwen3-ASR's
#: 0.5 s minimum clip (it pads a shorter one with silence its mask counts as audio).
CLIP_SECONDS = (0.5, 0.8)
#: The padded windows tried, shortest first (see the module docstring).
WINDOW_SECONDS = (1, 2, 3, 4)
#: Words of the tiny tokenizer (``w0`` ...).
WORDS = 40
#: :data:`AUDIO_SIZES` names Whisper's attributes; towers that call them by the common names (GLM-ASR's,
#: AudioFlamingo3's, MOSS's) get the same tiny values under these.
WHISPER_NAMES: Mapping[str, str] = {
    "hidden_size": "d_model",
    "num_hidden_layers": "encoder_layers",
    "num_attention_heads": "encoder_attention_heads",
    "intermediate_size": "encoder_ffn_dim",
}
#: The special tokens a tokenizer names itself (``eos_token``): the config's ids of these are the tokenizer's.
TOKENIZER_OWN = tuple(PreTrainedTokenizerFast.SPECIAL_TOKENS_ATTRIBUTES)
#: A processor's parts and options these rules set themselves; any other required ``__init__`` argument fails
#: the declaration with its name (Nemotron-3.5-Transcribe's ``alignment_tokenizer``).
PARTS = ("feature_extractor", "tokenizer", "chat_template")


def _declared(config_class: type[PreTrainedConfig]) -> set[str]:
    return _fields(config_class) or set(config_class().to_dict())


def _first_declared(declared: set[str], *names: str) -> str | None:
    return next((name for name in names if name in declared), None)


def _processor_audio_default(processor_class: type[ProcessorMixin], name: str) -> Any:
    """The processor's default of the audio option ``name``: where ``processor_default`` looks, and in the class's
    own ``audio_kwargs`` dict, where transformers 5.25's audio processors declare theirs (Qwen3-ASR's ``n_window``)."""
    value = processor_default(processor_class, "audio_kwargs", name)
    if value is None:
        value = (getattr(processor_class, "audio_kwargs", None) or {}).get(name)
    return value


def feature_extractor_class(config_class: type[PreTrainedConfig]) -> type:
    """The feature extractor transformers registers for the model type, else for the package that defines the
    audio tower's config (MusicFlamingo registers none, and runs AudioFlamingo3's tower on its Whisper features)."""
    audio_module = sub_config_class(config_class, "audio_config").__module__
    for model_type in (config_class.model_type, audio_module.rsplit(".", 2)[-2]):
        name = FEATURE_EXTRACTOR_MAPPING_NAMES.get(model_type)
        if name:
            return feature_extractor_class_from_name(name)
    raise LookupError(f"transformers registers no feature extractor for {config_class.__name__} or its audio tower")


def tiny_audio_lm_audio_sizes(
    config_class: type[PreTrainedConfig],
    processor_class: type[ProcessorMixin],
    text_hidden: int,
    window_seconds: int,
) -> dict[str, Any]:
    """The tiny audio config of a composed audio LM whose feature extractor pads to ``window_seconds``."""
    audio_class = sub_config_class(config_class, "audio_config")
    declared = _declared(audio_class)
    default = audio_class()
    # tiny_audio_sizes reads the class sub_configs names; here that is often AutoConfig, so it gets the resolved one.
    resolved = type(config_class.__name__, (), {"sub_configs": {"audio_config": audio_class}})
    sizes = tiny_audio_sizes(resolved, text_hidden, processor_class)  # type: ignore[arg-type]
    for name, whisper in WHISPER_NAMES.items():
        if name in declared and whisper not in declared:
            sizes[name] = AUDIO_SIZES[whisper]
    width = _first_declared(declared, "d_model", "hidden_size")
    ffn = _first_declared(declared, "encoder_ffn_dim", "intermediate_size")
    if width and ffn:
        ratio, rest = divmod(getattr(default, ffn), getattr(default, width))
        if ratio and not rest:
            sizes[ffn] = sizes[width] * ratio
    pinned = _processor_audio_default(processor_class, "n_window")
    if pinned is not None and "n_window" in declared:
        sizes["n_window"] = pinned
        if "n_window_infer" in declared:
            sizes["n_window_infer"] = 2 * pinned
    if "max_source_positions" in declared:
        default_window = getattr(feature_extractor_class(config_class)(), "chunk_length", None)
        if default_window:
            positions, rest = divmod(default.max_source_positions * window_seconds, default_window)
            if rest:
                raise ValueError(
                    f"{audio_class.__name__}.max_source_positions={default.max_source_positions} for a window of"
                    f" {default_window} s gives no whole number of positions for {window_seconds} s"
                )
            sizes["max_source_positions"] = positions
    return {**sizes, "model_type": default.model_type}


def _tokenizer(special_tokens: Mapping[str, str]) -> PreTrainedTokenizerFast:
    """The Omni suite's word-level tokenizer, each token an attribute under the name the processor uses."""
    return tiny_omni_tokenizer(words=WORDS, special_tokens=special_tokens)


def _token_options(processor_class: type[ProcessorMixin]) -> dict[str, str]:
    """The processor's ``*_token`` arguments and their defaults (``audio_token="<sound>"``)."""
    parameters = inspect.signature(processor_class.__init__).parameters
    return {
        name: parameter.default
        for name, parameter in parameters.items()
        if name.endswith("_token") and isinstance(parameter.default, str)
    }


def _check_arguments(processor_class: type[ProcessorMixin]) -> None:
    parameters = inspect.signature(processor_class.__init__).parameters
    unknown = [
        name
        for name, parameter in parameters.items()
        if name not in ("self", *PARTS)
        and parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL)
        and parameter.default is parameter.empty
    ]
    if unknown:
        raise TypeError(
            f"{processor_class.__name__} needs {', '.join(unknown)}, which these rules cannot set"
            " (modelgraft.models.testing.audio_lm_batches.PARTS)"
        )


def _rows(layout: str, placeholder: str) -> list[tuple[str, float | None]]:
    """Each row's text and its clip's seconds (None: a text-only row). Rows differ in length, so each is padded."""
    with_clip = [
        (f"w{row} w{row + 7} {placeholder} w{row + 20} " + " ".join(f"w{30 + i}" for i in range(2 + 3 * row)), seconds)
        for row, seconds in enumerate(CLIP_SECONDS)
    ]
    text_only = [(" ".join(f"w{(row + i) % WORDS}" for i in range(5 + 4 * row)), None) for row in range(2)]
    if layout == "audio":
        return with_clip
    if layout == "text":
        return text_only
    if layout == "mixed":
        return [with_clip[1], text_only[1]]
    raise ValueError(f"unknown layout {layout!r}; one of {', '.join(LAYOUTS)}")


def _pad(rows: Sequence[torch.Tensor], value: int, side: str) -> torch.Tensor:
    """Rows of different lengths padded with ``value`` on ``side`` to the longest."""
    longest = max(row.shape[-1] for row in rows)
    padded = []
    for row in rows:
        fill = row.new_full((longest - row.shape[-1],), value)
        padded.append(torch.cat((fill, row) if side == "left" else (row, fill)))
    return torch.stack(padded)


@dataclass(frozen=True)
class AudioLmBatches:
    """A composed audio LM's tiny config, processor and batches, from its top-level config class and processor
    class (see the module docstring)."""

    config_class: type[PreTrainedConfig]
    processor_class: type[ProcessorMixin]

    def config(self) -> PreTrainedConfig:
        """A fresh copy of the tiny config (tests change theirs)."""
        return copy.deepcopy(self._parts[0])

    def processor(self) -> ProcessorMixin:
        """The model's own processor over the tiny tokenizer and feature extractor (built once; do not change it)."""
        return self._parts[1]

    @property
    def window_seconds(self) -> int:
        """The seconds the feature extractor pads each clip to (see the module docstring)."""
        return self._parts[2]

    def batch(self, layout: str) -> dict[str, torch.Tensor]:
        """The processor's outputs for ``layout`` (:data:`LAYOUTS`), with labels: ``"audio"``, two rows of one clip
        each; ``"text"``, two text-only rows; ``"mixed"``, a row with a clip beside a text-only one. Labels are the
        ids with padding and audio placeholders ignored: a placeholder holds a feature row, not a word to predict."""
        config, processor, _ = self._parts
        return self._batch(config, processor, layout)

    @cached_property
    def _parts(self) -> tuple[PreTrainedConfig, ProcessorMixin, int]:
        """The tiny config and processor for the shortest window upstream's model takes (module docstring)."""
        _check_arguments(self.processor_class)
        tokens = self._tokens()
        failures = []
        for seconds in WINDOW_SECONDS:
            config = self._build_config(_tokenizer(tokens), seconds)
            processor = self._build_processor(config, tokens, seconds)
            try:
                self._probe(config, processor)
            except (RuntimeError, ValueError, IndexError) as error:
                failures.append(f"{seconds} s: {type(error).__name__}: {error}")
                continue
            return config, processor, seconds
        raise ValueError(
            f"upstream's {self.config_class.__name__} model takes none of the tiny windows:\n" + "\n".join(failures)
        )

    def _tokens(self) -> dict[str, str]:
        """Every ``*_token`` the processor takes (its defaults), reads from its tokenizer (each becomes one of its
        own, ``<audio_token>``) or sets itself, by name; and one of its own for each other special id the config
        declares (Qwen3-ASR's ``timestamp_token_id``), so every id the config holds is in the tiny vocabulary."""
        options = _token_options(self.processor_class)

        def build(attributes: Mapping[str, str]) -> ProcessorMixin:
            tokenizer = _tokenizer({**options, **attributes})
            return build_processor(
                self.processor_class,
                feature_extractor=self._feature_extractor(AUDIO_SIZES["num_mel_bins"], 1),
                tokenizer=tokenizer,
            )

        attributes = read_tokenizer_attributes(build, self.processor_class.__name__)
        processor = build(attributes)
        own = {
            name: value
            for name, value in vars(processor).items()
            if name.endswith("_token") and isinstance(value, str) and value
        }
        tokens = {**options, **attributes, **own}
        for name in sorted(_declared(self.config_class)):
            token = name.removesuffix("_id")
            if name.endswith("_token_id") and token not in tokens and token not in TOKENIZER_OWN:
                tokens[token] = f"<{token}>"
        return tokens

    def _feature_extractor(self, num_mel_bins: int, seconds: int, n_window: int | None = None) -> Any:
        """The feature extractor at ``num_mel_bins``, padding to ``seconds``, chunking by the tower's ``n_window``."""
        extractor_class = feature_extractor_class(self.config_class)
        if extractor_class is WhisperFeatureExtractor:
            return whisper_features(num_mel_bins, seconds=seconds)
        parameters = inspect.signature(extractor_class.__init__).parameters
        options = {
            "feature_size": num_mel_bins,
            "sampling_rate": SAMPLING_RATE,
            "chunk_length": seconds,
            "n_window": n_window,
        }
        return extractor_class(**{k: v for k, v in options.items() if k in parameters and v is not None})

    def _build_config(self, tokenizer: PreTrainedTokenizerFast, seconds: int) -> PreTrainedConfig:
        text_class = sub_config_class(self.config_class, "text_config")
        text = tiny_text_sizes(self.config_class)
        if "mrope_section" not in (getattr(text_class(), "rope_parameters", None) or {}):
            text["rope_parameters"] = {k: v for k, v in text["rope_parameters"].items() if k != "mrope_section"}
        text.update(model_type=text_class.model_type, vocab_size=len(tokenizer))
        # The tokenizer's own ids, not the default text config's (GLM-ASR's eos ids lie far past the tiny vocabulary).
        text_declared = _declared(text_class)
        for token in TOKENIZER_OWN:
            if f"{token}_id" in text_declared:
                text[f"{token}_id"] = getattr(tokenizer, f"{token}_id")
        audio = tiny_audio_lm_audio_sizes(self.config_class, self.processor_class, text["hidden_size"], seconds)
        processor = build_processor(
            self.processor_class,
            feature_extractor=self._feature_extractor(audio["num_mel_bins"], seconds),
            tokenizer=tokenizer,
        )
        config = self.config_class(text_config=text, audio_config=audio, **self._special_ids(processor, tokenizer))
        for sub in (config, config.text_config, config.audio_config):
            sub._attn_implementation = "eager"
            sub.dtype = torch.float32
        return config

    def _special_ids(self, processor: ProcessorMixin, tokenizer: PreTrainedTokenizerFast) -> dict[str, int]:
        """``audio_token_id`` the id the processor writes, each other ``*_token_id`` the config declares the id of the
        processor's token of that name, and the tokenizer's own ``pad``/``bos``/``eos`` ids where declared."""
        declared = _declared(self.config_class)
        ids = {"audio_token_id": tokenizer.convert_tokens_to_ids(processor.audio_token)}
        for name in declared:
            if not name.endswith("_token_id") or name in ids:
                continue
            token = getattr(processor, name.removesuffix("_id"), None)
            if isinstance(token, str):
                ids[name] = tokenizer.convert_tokens_to_ids(token)
            elif getattr(tokenizer, name, None) is not None:
                ids[name] = getattr(tokenizer, name)
        return ids

    def _build_processor(self, config: PreTrainedConfig, tokens: Mapping[str, str], seconds: int) -> ProcessorMixin:
        """The processor at the tiny config's mel bins and chunk size; options the config declares too are its."""
        audio = config.audio_config
        parameters = inspect.signature(self.processor_class.__init__).parameters
        options = {
            name: getattr(config, name)
            for name in parameters
            if name not in PARTS and not name.endswith("_token") and name in _declared(self.config_class)
        }
        extractor = self._feature_extractor(audio.num_mel_bins, seconds, getattr(audio, "n_window", None))
        return build_processor(
            self.processor_class, feature_extractor=extractor, tokenizer=_tokenizer(tokens), **options
        )

    def _probe(self, config: PreTrainedConfig, processor: ProcessorMixin) -> None:
        """Upstream's base model on the audio rows: it raises where its feature rows miss the placeholders."""
        seed_everything(0)
        model = MODEL_MAPPING[self.config_class](config).eval()
        batch = self._batch(config, processor, "audio")
        batch.pop("labels")
        with torch.no_grad():
            model(**batch, use_cache=False)

    def _padding_side(self, processor: ProcessorMixin) -> str:
        ids = self._encode_text(processor, ["w0", "w0 w1 w2"])["attention_mask"]
        return "left" if ids[0, 0] == 0 else "right"

    @staticmethod
    def _encode_text(processor: ProcessorMixin, texts: list[str]) -> dict[str, torch.Tensor]:
        """Text-only rows, through the processor where it takes text alone (its padding side), else its tokenizer."""
        try:
            encoded = processor(text=texts, audio=None, text_kwargs={"padding": True}, return_tensors="pt")
        except (TypeError, ValueError):
            encoded = processor.tokenizer(texts, padding=True, return_tensors="pt")
        return {key: encoded[key] for key in ("input_ids", "attention_mask")}

    def _batch(self, config: PreTrainedConfig, processor: ProcessorMixin, layout: str) -> dict[str, torch.Tensor]:
        rows = _rows(layout, processor.audio_token)
        audio_rows = [(text, seconds) for text, seconds in rows if seconds is not None]
        text_rows = [text for text, seconds in rows if seconds is None]
        batch: dict[str, torch.Tensor] = {}
        if audio_rows:
            clips = [synthetic_audio(seconds, seed=row) for row, (_, seconds) in enumerate(audio_rows)]
            encoded = processor(
                text=[text for text, _ in audio_rows],
                audio=clips,
                sampling_rate=SAMPLING_RATE,
                text_kwargs={"padding": True},  # rows of different lengths; the audio keeps its own padding
                return_tensors="pt",
            )
            unused = set(getattr(processor, "unused_input_names", ()) or ())
            batch = {key: value for key, value in encoded.items() if key not in unused}
        if text_rows:
            text = self._encode_text(processor, text_rows)
            if batch:
                rows = [
                    ids[mask.bool()]
                    for part in (batch, text)
                    for ids, mask in zip(part["input_ids"], part["attention_mask"], strict=True)
                ]
                side = self._padding_side(processor)
                batch["input_ids"] = _pad(rows, processor.tokenizer.pad_token_id, side)
                batch["attention_mask"] = _pad([torch.ones_like(row) for row in rows], 0, side)
            else:
                batch = text
        ignored = (batch["attention_mask"] == 0) | (batch["input_ids"] == config.audio_token_id)
        batch["labels"] = batch["input_ids"].masked_fill(ignored, IGNORE_INDEX)
        return batch


def audio_lm_classes(model: str) -> tuple[type[PreTrainedConfig], type[ProcessorMixin], type]:
    """The top-level config class (the one with audio and text sub-configs), the processor class and the
    ``*ForConditionalGeneration`` class that ``transformers.models.<model>`` exports."""
    package = f"transformers.models.{model}"

    def exported(kind: str) -> list[Any]:
        module = importlib.import_module(f"{package}.{kind}_{model}")
        return [getattr(module, name) for name in module.__all__]

    configs = [
        cls
        for cls in exported("configuration")
        if {"audio_config", "text_config"} <= set(getattr(cls, "sub_configs", {}))
    ]
    processors = [cls for cls in exported("processing") if issubclass(cls, ProcessorMixin)]
    heads = [cls for cls in exported("modeling") if cls.__name__.endswith("ForConditionalGeneration")]
    if len(configs) != 1 or len(processors) != 1 or len(heads) != 1:
        raise LookupError(f"{package} exports no single composed config, processor and ForConditionalGeneration")
    return configs[0], processors[0], heads[0]
