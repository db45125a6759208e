"""The parameter server: shards that own tables, the client that talks to them, the cluster.

  protocol.py      the wire: one multipart ZeroMQ message per request, zero-copy array frames
  auth.py          HMAC of every request with the cluster secret (required off loopback)
  routing.py       pure functions from keys and dense names to shards
  transport.py     the client's sockets: requests in flight, timeouts, resends
  client.py        PSClient: pull, push, push_pull and wait with typed tickets (the data plane)
  admin.py         PSAdmin: save, load, policy, leases, stats as typed calls (client.admin)
  ps_config.py     the tables every shard serves and the client's timeouts (one YAML)
  shard_server.py  one shard: the request loop and its {op: handler} table
  shard_tables.py  a shard's tables and the data-plane ops on them (pull, push, dense)
  shard_save_runs.py  a shard's two-phase saves (written by a background thread) and restores
  shard_requests.py   request checks, the ok reply, the outbox for deferred replies
  shard_policy.py  the POLICY op: read, dry-run or apply admission/eviction settings
  replay_cache.py  recent mutating requests, so a resent push is applied once
  shard_saves.py   what a shard writes when it saves, and how a chain of saves is restored
  sync_steps.py    sync mode on the shard: gradients held per step, applied at the barrier
  rank_leases.py   worker ranks handed out as leases (shard 0)
  cluster.py       who am I: roles and endpoints from STREAMREC_* or TF_CONFIG
  launcher.py      `streamrec launch`: shards and workers as local processes, like fleetrun
"""
