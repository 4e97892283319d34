import skyrl_gym
from skyrl_gym import BaseTextEnv, StepOutput
from skyrl_gym.rewards import last_boxed_content


class ReverseEnv(BaseTextEnv):
    """Reverse a word; two tries, the answer in \\boxed{}."""

    def __init__(self, env_config=None, extras=None):
        super().__init__(env_config, extras)
        self.word = ((extras or {}).get("reward_spec") or {}).get("ground_truth")
        if not isinstance(self.word, str):  # a clear error for a bad row, not a KeyError
            raise skyrl_gym.DataError("env 'reverse': reward_spec.ground_truth must be the word")
        self.max_turns = 2

    def step(self, action: str) -> StepOutput:
        self.turns += 1
        correct = (answer := last_boxed_content(action)) == self.word[::-1]
        done = correct or self.turns >= self.max_turns
        retry = [] if done else [{"role": "user", "content": "Not quite. Try again."}]
        reason = None if correct else "no \\boxed{} answer" if answer is None else "wrong word"  # say why
        return StepOutput(observations=retry, reward=float(correct), done=done, metadata={"reason": reason})


skyrl_gym.register(id="reverse", entry_point=ReverseEnv)

env = skyrl_gym.make("reverse", extras={"reward_spec": {"ground_truth": "gym"}})
prompt, _ = env.init([{"role": "user", "content": "Reverse 'gym'."}])
print(env.step(r"\boxed{myg}"))  # observations: [], reward: 1.0, done: True
