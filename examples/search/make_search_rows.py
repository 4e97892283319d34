"""Turn question/answer records into ``search`` rows.

    python examples/search/make_search_rows.py qa.jsonl rows.jsonl [--data-source searchR1_nq] [--max-turns 4]

Each input line is ``{"question": "...", "golden_answers": ["..."]}`` (the Search-R1/FlashRAG
field names; ``answers`` or ``answer`` work too). Serve a corpus for the env with
``skyrl-gym serve-retriever --corpus corpus.jsonl`` and set ``env_config.search_url``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from skyrl_gym.envs.search.dataset import make_row  # noqa: E402

ANSWER_KEYS = ("golden_answers", "answers", "answer")


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source")
    parser.add_argument("out")
    parser.add_argument("--data-source", default="searchR1_custom")
    parser.add_argument("--split", default="train")
    parser.add_argument("--max-turns", type=int, default=None)
    args = parser.parse_args(argv)
    rows = []
    with open(args.source, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            record = json.loads(line)
            answers = next((record[k] for k in ANSWER_KEYS if record.get(k)), None)
            if answers is None:
                print(f"{args.source}, line {number}: no {' / '.join(ANSWER_KEYS)} field", file=sys.stderr)
                return 1
            rows.append(make_row(record.get("question", ""), answers, data_source=args.data_source,
                                 index=len(rows), split=args.split, max_turns=args.max_turns))
    with open(args.out, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} search rows to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
