"""Read a retrieval corpus: JSON lines, one document per line.

Each line is an object with ``contents`` (the Search-R1 format: ``"Title"\\ntext``), or with
``text`` and an optional ``title`` (then ``contents`` is built the same way). ``id`` is optional
(the line number is used). Other fields are kept and returned with the document.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List

from skyrl_gym.errors import DataError


class CorpusError(DataError):
    """A corpus line is not a document; the message names the file and the line."""


def normalise_document(raw: Any, where: str) -> Dict[str, Any]:
    if not isinstance(raw, dict):
        raise CorpusError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    document = dict(raw)
    if not isinstance(document.get("contents"), str):
        text = document.get("text")
        if not isinstance(text, str):
            raise CorpusError(f'{where}: a document needs a "contents" string (or "text" with an optional "title")')
        title = document.get("title")
        document["contents"] = f'"{title}"\n{text}' if title else text
    return document


def load_corpus(path: str) -> List[Dict[str, Any]]:
    """All documents of a JSONL corpus, each with ``id`` and ``contents``."""
    documents: List[Dict[str, Any]] = []
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}, line {line_number}"
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorpusError(f"{where}: not valid JSON ({exc.msg} at character {exc.pos})") from None
            document = normalise_document(raw, where)
            document.setdefault("id", str(len(documents)))
            documents.append(document)
    if not documents:
        raise CorpusError(f"{path}: the corpus has no documents")
    return documents
