"""Real HTTP servers, backed by a real model (``HFEngine``), that speak two APIs the engine clients use:

- SGLang's native API (``/generate`` with ``input_ids``, ``/update_weights_from_disk``,
  ``/release_memory_occupation``, ``/resume_memory_occupation``, ``/get_model_info``, ``/health``), written from
  SGLang's documented request/response fields, because SGLang itself cannot run on this CPU machine;
- a text-only OpenAI ``/v1/completions`` (refuses token-id prompts, returns no token ids), like servers that
  lack vLLM's extensions, to exercise :class:`~skygym_adapters.engines.remote.RemoteEngine`'s fallbacks.

The servers run uvicorn in a background thread of the test process.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_app(engine: Any, model_path: str) -> Any:
    from fastapi import FastAPI, HTTPException

    app = FastAPI()
    state: Dict[str, Any] = {"released": False, "model_path": model_path, "calls": []}
    app.state.sglang = state

    @app.get("/health")
    async def health() -> Dict[str, str]:
        return {"status": "ok"}

    @app.get("/get_model_info")
    async def model_info() -> Dict[str, Any]:
        return {"model_path": state["model_path"], "is_generation": True}

    @app.post("/generate")
    async def generate(body: Dict[str, Any]) -> Any:
        state["calls"].append("generate")
        if state["released"]:
            raise HTTPException(status_code=400, detail="memory released; call /resume_memory_occupation")
        input_ids = body.get("input_ids")
        if input_ids is None:
            raise HTTPException(status_code=400, detail="this server needs input_ids")
        single = bool(input_ids) and isinstance(input_ids[0], int)
        batch: List[List[int]] = [input_ids] if single else input_ids
        sp = body.get("sampling_params") or {}
        params = {
            "max_generate_length": sp.get("max_new_tokens", 128),
            "temperature": sp.get("temperature", 1.0),
            "top_p": sp.get("top_p", 1.0),
            "top_k": sp.get("top_k", -1),
            "min_p": sp.get("min_p", 0.0),
            "stop": sp.get("stop") or [],
            "stop_token_ids": sp.get("stop_token_ids") or [],
            "logprobs": bool(body.get("return_logprob")),
        }
        if sp.get("sampling_seed") is not None:
            params["seed"] = sp["sampling_seed"]
        out = await engine.generate(batch, params)
        results = []
        for i, ids in enumerate(out["response_ids"]):
            meta: Dict[str, Any] = {
                "id": f"req-{time.monotonic_ns()}-{i}",
                "finish_reason": {"type": out["stop_reasons"][i]},
                "prompt_tokens": len(batch[i]),
                "completion_tokens": len(ids),
            }
            if body.get("return_logprob"):
                meta["output_token_logprobs"] = [[lp, tok, None] for lp, tok in zip(out["response_logprobs"][i], ids)]
            results.append({"text": out["responses"][i], "output_ids": ids, "meta_info": meta})
        return results[0] if single else results

    @app.post("/update_weights_from_disk")
    async def update_weights_from_disk(body: Dict[str, Any]) -> Dict[str, Any]:
        state["calls"].append("update_weights_from_disk")
        try:
            await engine.update_weights(body["model_path"])
        except Exception as exc:  # SGLang answers success=False with a message
            return {"success": False, "message": f"{type(exc).__name__}: {exc}"}
        state["model_path"] = body["model_path"]
        return {"success": True, "message": "Succeeded in updating model weights."}

    @app.post("/release_memory_occupation")
    async def release(body: Dict[str, Any] = None) -> Dict[str, Any]:  # type: ignore[assignment]
        state["released"] = True
        await engine.sleep()
        return {}

    @app.post("/resume_memory_occupation")
    async def resume(body: Dict[str, Any] = None) -> Dict[str, Any]:  # type: ignore[assignment]
        await engine.wake_up()
        state["released"] = False
        return {}

    # ---- a text-only OpenAI completions endpoint
    @app.get("/v1/models")
    async def models() -> Dict[str, Any]:
        return {"object": "list", "data": [{"id": "text-only", "object": "model"}]}

    @app.post("/v1/completions")
    async def completions(body: Dict[str, Any]) -> Dict[str, Any]:
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise HTTPException(status_code=400, detail="prompt must be a string")
        ids = engine.tokenizer.encode(prompt, add_special_tokens=False)
        out = await engine.generate([ids], {
            "max_generate_length": body.get("max_tokens", 16), "temperature": body.get("temperature", 1.0),
            "stop": body.get("stop") or [], **({"seed": body["seed"]} if body.get("seed") is not None else {}),
        })
        reason = out["stop_reasons"][0]
        return {"id": "cmpl-1", "object": "text_completion", "model": "text-only",
                "choices": [{"index": 0, "text": out["responses"][0], "finish_reason": reason, "logprobs": None}]}

    return app


def make_canned_openai_app(state: Dict[str, Any]) -> Any:
    """An OpenAI-style server that answers ``/v1/models`` with ``state["models"]`` and every (chat) completion with
    ``state["answer"]`` (or the next of ``state["answers"]``; ``"hang"`` answers never; ``{"status": 400, "body": ...}``
    answers with that status), whatever was asked: the broken and hostile servers a client must refuse clearly.
    The completions requests' prompts are kept in ``state["prompts"]``."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> Any:
        return JSONResponse(state.get("models", {"object": "list", "data": [{"id": "canned"}]}))

    async def answer() -> Any:
        given = state["answers"].pop(0) if state.get("answers") else state["answer"]
        if given == "hang":  # a request that is never answered (state["hanging"] counts them)
            state["hanging"] = state.get("hanging", 0) + 1
            await asyncio.sleep(3600)
        if isinstance(given, dict) and set(given) == {"status", "body"}:
            return JSONResponse(given["body"], status_code=given["status"])
        return JSONResponse(given)

    @app.post("/v1/completions")
    async def completions(body: Dict[str, Any]) -> Any:
        if state.get("chat_only"):  # a server without the completions API, as many hosted ones are
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        state.setdefault("prompts", []).append(body.get("prompt"))
        return await answer()

    @app.post("/v1/chat/completions")
    async def chat(body: Dict[str, Any]) -> Any:
        return await answer()

    return app


@contextmanager
def serve(app: Any) -> Iterator[str]:
    """Run ``app`` with uvicorn on a free local port in a background thread; yields its base URL."""
    import uvicorn

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started:
        if time.time() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
