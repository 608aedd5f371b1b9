"""`gregor console`: a small web console for a Gregor (or Kafka) cluster.

It reads and changes the cluster only through the Kafka protocol, as any client would
(confluent-kafka's AdminClient, Consumer and Producer, and DescribeLogDirs on Gregor's codec),
so it works against any cluster whose APIs match and is bound by the ACLs of the principal its
--command-config authenticates as. Three rooms:

- `reader`: the admin-reading layer, cluster state as JSON-ready dicts, every call bounded in time;
- `server`: the HTTP server (stdlib only: a JSON API under /api/ and the static page);
- `static/`: one HTML page, its script (vanilla JS, a hand-written SVG lag chart) and its style.
"""
