"""Job control: the channel between the REST admin API and the running training job.

  channel.py       ControlServer (the chief's ZeroMQ REP socket), ControlClient (the service's
                   side), the JobHandler protocol of ops, and control.json discovery

Both the trainer (which serves it) and the service (which calls it) import it; neither
imports the other.
"""
