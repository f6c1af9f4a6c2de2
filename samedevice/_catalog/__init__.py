"""The catalog's files inside an installed package.

In a checkout this package is empty: `cases/`, `fixes/` and `docs/` live at the top of the repository.
A wheel built from the checkout maps them here (`[tool.setuptools.package-dir]` in pyproject.toml),
as `samedevice._catalog.cases`, `samedevice._catalog.fixes` and `samedevice._catalog.docs`, and
`samedevice.registry.ROOT` points here, so `tour`, `show`, `report` and `copy` work from any folder.
"""
