"""Where a Spanner database's statements run: its namespace and its dialect."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Scope:
    prefix: str = ""
    """The namespace: the prefix of the database's queues in the catalog ("" is the default
    namespace, spanq.v1's, reached by a database name no CreateDatabase made)."""
    pg: bool = False
    """The database speaks Spanner's PostgreSQL dialect."""


DEFAULT_SCOPE = Scope()
