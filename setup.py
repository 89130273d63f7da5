"""Packages for setuptools: every folder with an __init__.py under the four source folders, as flywheel.*.

pyproject.toml maps flywheel.flows -> flows/ (and tasks/, verifiers/, schemas/); subpackages follow their parent,
so a new subpackage (a new env folder) needs no packaging line.
"""

from setuptools import find_packages, setup

SOURCES = ("flows", "tasks", "verifiers", "schemas")
PACKAGES = [f"flywheel.{top}" for top in SOURCES] + [
    f"flywheel.{top}.{sub}" for top in SOURCES for sub in find_packages(top)
]
setup(packages=PACKAGES)
