"""pydantic-core without its package ``__init__``: import this before any pydantic_core
module.

The boundary models need only the extension ``pydantic_core._pydantic_core``
(``SchemaValidator``, ``ValidationError``). The package ``__init__`` also imports
``core_schema`` (a TypedDict for every kind of schema), and with it ``decimal``,
``fractions`` and ``typing_extensions``: about 15 ms of each exec'd in-process ADD
(``python -X importtime``, bench/README.md, figure 6).
"""

from __future__ import annotations

from rdma_cni.lightpkg import light_package

light_package("pydantic_core")
