"""Packages for setuptools: the flywheel namespace and every folder with an __init__.py under the four source
folders, as flywheel.*.

src/flywheel/ links to flows/, tasks/, verifiers/ and schemas/ (pyproject.toml maps "" -> src), so a new
subpackage (a new env folder) needs no packaging line. `flywheel` itself is listed (it has no __init__.py: a
namespace) so setuptools sees a plain src layout and makes `pip install -e` a static .pth of src/, not an import
hook. A wheel holds copies of the files, not the links.
"""

from setuptools import find_packages, setup

SOURCES = ("flows", "tasks", "verifiers", "schemas")
PACKAGES = ["flywheel"] + [f"flywheel.{top}" for top in SOURCES] + [
    f"flywheel.{top}.{sub}" for top in SOURCES for sub in find_packages(top)
]
setup(packages=PACKAGES)
