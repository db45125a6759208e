"""Running streamrec's roles as processes: the root config, the local supervisor and file jobs.

- :mod:`launcher.system_config`: the one YAML, and each role's own files rendered from it.
- :class:`launcher.launch.Launcher`: shards and workers started like ``fleetrun``, each a
  :class:`launcher.role_process.RoleProcess` restarted under a :class:`launcher.restart_policy.RestartPolicy`.
- :func:`launcher.up.run_up`: ``streamrec up``, the whole system on one machine (``up_*`` are its parts).
- :mod:`launcher.file_job`: ``streamrec train-files``, shards and workers over files.
"""
