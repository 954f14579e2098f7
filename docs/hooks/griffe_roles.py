"""Griffe extension: the docstrings' reST roles (``:class:`Flag```, ``:mod:`.runtime```) as Markdown code.

The code's docstrings are written for ``help()`` and Sphinx-style readers;
mkdocstrings renders Markdown, where a role would show as its raw text.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const|ref):`~?([^`]+)`")


class ReSTRoles(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(lambda m: f"`{m.group(1)}`", obj.docstring.value)
