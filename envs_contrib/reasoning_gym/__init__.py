"""reasoning-gym datasets as skyrl_gym envs: ``reasoning_gym/<name>`` for every dataset of the ``reasoning-gym``
package (see README.md). Importing this package or its ``registration`` module does not import reasoning-gym."""
