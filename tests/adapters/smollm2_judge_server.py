"""A real model as the judge: SmolLM2-135M-Instruct (the embedded model) behind ``/v1/chat/completions``, run as a
process of its own by ``test_judge_with_smollm2.py``. Greedy decoding, one request at a time. A 135M model is a poor
judge; the test checks the judge path with a real model's answers, not the quality of its verdicts.

    python tests/adapters/smollm2_judge_server.py     # prints the port once the model is loaded, then serves
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict

MODEL_NAME = "smollm2-135m"


def main() -> None:
    import torch

    from skygym_adapters.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(MODEL_NAME, device="cpu")
    lock = threading.Lock()

    def complete(body: Dict[str, Any]) -> str:
        ids = tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True, return_tensors="pt")
        if not isinstance(ids, torch.Tensor):  # transformers 5 answers a BatchEncoding
            ids = ids["input_ids"]
        with lock, torch.no_grad():
            out = model.generate(
                ids,
                max_new_tokens=int(body.get("max_tokens") or 48),
                do_sample=False,
                pad_token_id=tokenizer.eos_token_id,
            )
        return tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, payload: Any, status: int = 200) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            if body.get("model") != MODEL_NAME:
                self._send({"error": {"message": f"the model {body.get('model')!r} does not exist"}}, 404)
                return
            text = complete(body)
            self._send(
                {
                    "id": "judge",
                    "object": "chat.completion",
                    "model": MODEL_NAME,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                }
            )

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
