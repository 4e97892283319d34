"""``skyrl-gym`` subcommands contributed by the adapters package (entry-point group ``skyrl_gym.cli``)."""
