"""``skyrl-gym serve-retriever``: serve a retrieval index over a JSONL corpus for the search envs.

The options and the command live in :mod:`skyrl_gym.retrieval.command`; index kinds other than BM25
(``--retriever dense``) come from installed packages (:mod:`skyrl_gym.retrieval.kinds`).
"""

from __future__ import annotations

from typing import Any


def register(subparsers: Any) -> None:
    from skyrl_gym.retrieval import command

    parser = subparsers.add_parser(
        "serve-retriever",
        help="serve a retrieval index over a JSONL corpus (POST /retrieve)",
        description=command.DESCRIPTION,
    )
    command.add_arguments(parser)
