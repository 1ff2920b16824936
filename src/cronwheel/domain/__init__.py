"""The pure domain: schedules, time zones, the firing state machine and policies.

Nothing in this package does I/O, starts threads, or reads the wall clock.
"""
