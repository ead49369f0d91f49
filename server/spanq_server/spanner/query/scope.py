"""Where a Spanner database's statements run: its namespace and its dialect.

Namespaces never reach each other. A database CreateDatabase made has its own
prefix (``d1_``: its table ``Secret`` is PostgreSQL's ``d1_secret``), and its
names only ever get that prefix. The default namespace (a database name no
CreateDatabase made, and spanq.v1) has none, so a name spelled like another
namespace's relation (``d1_secret``) would reach it: such names are not the
default namespace's (``Scope.owns``).
"""

import dataclasses
import re

NAMESPACE = re.compile(r"d[0-9]+_")
"""The prefixes CreateDatabase gives (``spanq.spanner_databases.namespace``: d1_, d2_, ...)."""


def in_a_namespace(name: str) -> bool:
    """Whether a PostgreSQL name lies in a created database's namespace."""
    return NAMESPACE.match(name) is not None


@dataclasses.dataclass(frozen=True)
class Scope:
    prefix: str = ""
    """The namespace: the prefix of the database's queues in the catalog ("" is the default
    namespace, spanq.v1's, reached by a database name no CreateDatabase made)."""
    pg: bool = False
    """The database speaks Spanner's PostgreSQL dialect."""
    database: str | None = None
    """The database's name, for a database CreateDatabase made (its proto bundle's, protos.py)."""

    def owns(self, name: str) -> bool:
        """Whether a (folded) name in the database's statements may name one of its tables or
        queues: in the default namespace, not one of a created database's (``d1_secret``)."""
        return bool(self.prefix) or not in_a_namespace(name)


DEFAULT_SCOPE = Scope()

RESERVED = ("names that start like d1_ are the namespaces of the databases CreateDatabase made, which the "
            "default namespace does not reach")
"""Why the default namespace refuses a name that is another namespace's."""
