"""Maps the repository's folders to their import names (everything else is in pyproject.toml).

``skyrl_gym`` is the declared drop-in for the public SkyRL-gym; every other import name is one that no other
distribution on the package index ships, so installing next to AdapterHub's ``adapters`` or upstream's
``skyrl-train`` overwrites nothing. Editable and wheel installs both honour the mapping.
"""

from setuptools import find_packages, setup

IMPORT_NAME_TO_FOLDER = {
    "skyrl_gym": "skyrl_gym",
    "skygym_sandboxes": "sandboxes",
    "skygym_adapters": "adapters",
    "skygym_train": "skygym_train",
    "skygym_contrib": "envs_contrib",
}

packages = []
for name, folder in IMPORT_NAME_TO_FOLDER.items():
    packages += [name] + [f"{name}.{sub}" for sub in find_packages(folder)]

setup(packages=packages, package_dir=dict(IMPORT_NAME_TO_FOLDER))
