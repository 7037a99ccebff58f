"""A host's observation panels for the HTML report: the registered renderers, else the generic panel.

    host_panels(host.observations)      # [Panel("gpu", ...), Panel("topology", ...), ...]

The built-in renderers register themselves when their modules are imported, which this module
does first (``builtin_panels``, ``panel_telemetry``, ``fabric_views``), as ``probes/__init__.py`` lists its probes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from healthcheck.reports import builtin_panels, fabric_views, panel_telemetry
from healthcheck.reports.panels import ORDER, PANELS, Panel, generic_panel

BUILTIN = (builtin_panels, panel_telemetry, fabric_views)  # imported for their @panel registrations


def host_panels(observations: Mapping[str, Any]) -> list[Panel]:
    """The panels of one host, in probe-name order; a renderer that raises is shown as a note."""
    out: list[Panel] = []
    for probe in sorted(observations, key=lambda p: (ORDER.index(p) if p in ORDER else len(ORDER), p)):
        obs = observations[probe]
        if obs in (None, {}, []):
            continue
        fn = PANELS.get(probe)
        try:
            built = fn(obs) if fn else generic_panel(probe, obs)
        except Exception as exc:  # a malformed observation must not break the whole report
            built = Panel(title=probe, template="panels/note.html.j2", view=None,
                          note=f"cannot render {probe} observations: {type(exc).__name__}: {exc}")
        if built is not None:
            out.append(built)
    return out
