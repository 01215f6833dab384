"""Tool search: the index and its ranking (pure Python: no MCP types, no I/O, no network).

`SearchIndex` holds `ToolDocument`s grouped by server and ranks them for a keyword query or a
whole-step description (`search/index.py`); `search/text.py` has the words: identifier splitting,
the light stemmer, stop words and synonyms. The hub's `search_tools`/`call_tool` and the agent's
deferred tools use it through `omega_mcp.toolsearch`.
"""

from __future__ import annotations

from omega_mcp.search.index import FIELDS, Hit, SearchIndex, ToolDocument, Weights

__all__ = ["FIELDS", "Hit", "SearchIndex", "ToolDocument", "Weights"]
