"""The probes: one class per file, each named after the finding code it reports.

A probe is a plain object with any of the ``on_*`` methods of
:data:`trainwell.doctor.events.EVENTS` and ``on_end``; the registry
(:func:`trainwell.doctor.registry.default_probes`) lists the ones that run.
"""
