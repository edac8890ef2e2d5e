"""Idefics3 (vision encoder): generated modeling registered under HF model_type "idefics3_vision".

The vision tower of composed VLMs that name ``idefics3_vision`` in their ``vision_config`` (Aria), which build it
from that config alone (docs/vision-encoders.md). Upstream keeps the encoder in the Idefics3 VLM's own modeling
module, so the generated module is that whole module; only the vision model_type is registered, and the VLM's
classes (``Idefics3Model``, ``Idefics3ForConditionalGeneration``) stay in it as upstream's, unregistered.

The package is not named ``idefics3``: the survey's population leaves out every model with a package of that name
in the zoo (``scaffold/survey/population.py``), and the Idefics3 VLM is scaffolded on its own.
"""

from modelgraft.models.registry import register_model

register_model(
    "idefics3_vision",
    modeling={"gpu": "modelgraft.models.idefics3_vision.generated.patched_modeling_idefics3_gpu"},
    config="transformers.Idefics3VisionConfig",
)
