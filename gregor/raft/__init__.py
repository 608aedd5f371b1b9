"""The metadata quorum: KRaft's replicated log (KIP-595), with pre-vote (KIP-996) and snapshots (KIP-630).

    RaftManager   the node on asyncio: its listener, connections, flushes, the client API (manager.py)
      QuorumServer  the quorum listener: ApiVersions and the quorum's APIs (server.py)
      RaftNode      the sans-IO core: messages and clock ticks in, messages out (node.py), built on
        NodeBase            roles, transitions, quorum-state, requests in flight (node_base.py)
        ElectionHandlers    Vote and pre-vote, BeginQuorumEpoch, EndQuorumEpoch, timers (election.py)
        ReplicationHandlers the leader's log, Fetch and FetchSnapshot both sides (replication.py)
        LeaderState         replicas, the high watermark, check quorum (leader_state.py)
        BatchAccumulator    the leader's appends gathered into batches (accumulator.py)
      RaftLog       what the core needs of its log, and the epoch rules (log.py); kept in files with
                    gregor.storage (metadata_log.py, snapshot_files.py) or in memory (memory_log.py)
    records.py (batches, control records), snapshots.py (snapshot writer, reader, validator),
    quorum_state.py (the `quorum-state` file), listeners.py (what the layer above implements),
    snapshot_policy.py, wire.py (message builders), config.py (QuorumSettings, QuorumConfig),
    runner.py (a node as a process, for tests and benchmarks). See docs/kraft.md.
"""
