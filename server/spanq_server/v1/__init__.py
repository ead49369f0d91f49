"""The spanq.v1 front-end: QueueService (service.py) and its access rules."""
