"""LoRA training: adapters merged into the weights the engine receives and into the Hugging Face export."""

from __future__ import annotations

import os

import pytest
import torch

from skygym_train.config import load_config
from skygym_train.trainer import PPOTrainer
from tests.skygym_train.toy_envs import toy_overrides


@pytest.mark.slow
def test_lora_run_syncs_merged_weights_and_exports_a_loadable_folder(tiny_chat_model, toy_data, tmp_path):
    from transformers import AutoModelForCausalLM

    cfg = load_config(
        toy_overrides(
            tiny_chat_model,
            toy_data,
            tmp_path,
            **{
                "trainer.max_training_steps": 2,
                "trainer.policy.model.lora.rank": 4,
                "trainer.policy.model.lora.alpha": 8,
                "trainer.policy.model.lora.target_modules": "all-linear",
                "trainer.gradient_checkpointing": "true",
                "trainer.policy.optimizer_config.lr": 1e-2,
            },
        )
    )
    initial = AutoModelForCausalLM.from_pretrained(str(tiny_chat_model)).state_dict()
    with PPOTrainer(cfg) as trainer:
        trainer.fit()
        trainable = [n for n, p in trainer.policy.worker.model.named_parameters() if p.requires_grad]
        assert trainable and all("lora_" in n for n in trainable)
        engine_state = {k: v.detach().to("cpu", copy=True)  # beside the export, loaded on the host
                        for k, v in trainer.engine.engines[0].model.state_dict().items()}
        export = trainer.export_hf(str(tmp_path / "export"))
    exported = AutoModelForCausalLM.from_pretrained(str(export)).state_dict()
    assert (export / "tokenizer_config.json").exists()
    # every file as the umask allows: transformers wrote the weights 0600, unreadable to a server run by another user
    umask = os.umask(0)
    os.umask(umask)
    assert {f.name: oct(f.stat().st_mode & 0o777) for f in export.iterdir()} == {
        f.name: oct(0o666 & ~umask) for f in export.iterdir()}
    changed = [k for k in initial if not torch.allclose(initial[k], exported[k])]
    assert changed and all("proj" in k for k in changed)  # only LoRA-targeted projections moved
    for name, value in exported.items():
        torch.testing.assert_close(engine_state[name], value, msg=lambda m: f"{name}: {m}")
