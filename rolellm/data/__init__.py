"""RoleBench: the row schema, the `datasets` builder, statistics, leakage checks and Hub export."""
