"""Locks every stage may take: a lock with visible waits (holder, progress, timeout, takeover) and where locks
live (on a local file system, never a network one)."""
