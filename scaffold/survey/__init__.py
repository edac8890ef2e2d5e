"""``scaffold-survey``: measure the scaffolder on every decoder-only model of the pinned transformers.

For each model of the population (every package under the installed ``transformers/models/`` whose
``modeling_<m>.py`` defines a ``*ForCausalLM`` class, minus the zoo's ``models/<m>/``), in a temporary clone
of this repository, the survey does what a new user would:

    copier copy --trust --defaults -d model=<m> . models/<m>
    python -m pytest models/<m> -q -x -p no:cacheprovider

and classifies the outcome: pass, refused, broken or wrong, with the reason and the op slots the generated
GPU modeling guards. The tests get a ``--basetemp`` of their own: pytest sessions sharing the default root race in
cleaning it up when they end, and the loser exits 1 after its tests passed. A summary per category ends the run. One module per job:

- ``population``: which models (found by path) and which of them the command asked for;
- ``categories``: each model's category, by the clone's upstream reader;
- ``clones``: the temporary clones, their imports checked, reset after each model;
- ``processes``: child processes a timeout or an interrupt ends with their children;
- ``model_run``: one model, copied and tested; ``classify``: what its outcome is;
- ``workers``: the worker threads, one clone each;
- ``tables`` (Markdown, plain text, rich, JSON) and ``display`` (progress): the report;
- ``cli``: the command, its arguments and exit statuses (the shared table's).

This process never imports transformers, torch or the generator's reader: the population is found by path, and
everything that reads upstream runs in the clone. Of the generator it uses only the category table
(``modelgraft.generator.categories``) and the console scripts' exit-status handler, both imported on first use:
importing the survey loads nothing of the generator.
"""

from __future__ import annotations

from modelgraft.scaffold.survey.cli import build_parser, main

#: The command's face, as every console script's entry module has it: its parser and its entry point.
__all__ = ["build_parser", "main"]
