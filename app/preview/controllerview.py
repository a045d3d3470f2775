"""What the live preview knows of the running controller (docs/design.md §8).

The Lease holder publishes, on its record Lease ``<leader-election-id>-node-health`` in the
leader-election namespace (:mod:`app.core.published`), its effective settings
(``node-ipam-lb.io/effective-settings``) and its node-health decision
(``node-ipam-lb.io/unhealthy-nodes``, §4.11). :func:`controller_view` reads that one object
into a :class:`ControllerView`; :func:`resolve` lays the flags and ``NODE_IPAM_*``
variables the user gave over the published settings. Every gap (the Lease forbidden,
absent, malformed, or written by a version that publishes no settings) and every given
setting that differs from the controller's (a "what if") becomes one note, which the
preview prints as a ``Warning:`` line.

The address pools (issue 37, ``NodeAddressPool``) will be one more input here: read with
the record, kept in :class:`ControllerView`, noted the same way when they cannot be read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.config import PUBLISHED_SETTINGS, InvalidSettings, SelectionConfig, from_flags
from app.core.nodehealth import HEALTH_ANNOTATION, NO_UNHEALTHY, decode_unhealthy
from app.core.published import SETTINGS_ANNOTATION, decode_settings
from app.core.text import elide
from app.kube.client import ApiError

FORBIDDEN, NOT_FOUND = 403, 404
OWN_SETTINGS = "this command's settings (its flags, NODE_IPAM_* variables, else the defaults)"
"""What the preview decides with when it cannot know the controller's."""


@dataclass(frozen=True, slots=True)
class ControllerView:
    """The running controller as its record Lease shows it.

    ``settings``: the published ``{flag name: value}``, ``None`` when unknown;
    ``unhealthy``: node name -> why, the Lease holder's health view (empty with health
    checks off, or when unknown); ``notes``: what could not be known and what was used
    instead, one sentence each; ``where``: ``namespace/name`` of the record.
    """

    where: str
    settings: Mapping[str, Any] | None = None
    unhealthy: Mapping[str, str] = field(default_factory=lambda: NO_UNHEALTHY)
    notes: tuple[str, ...] = ()


def controller_view(lease: Mapping[str, Any] | ApiError | None, *, where: str) -> ControllerView:
    """The :class:`ControllerView` of the record Lease ``where`` (``namespace/name``) as
    one GET answered it: the object, ``None`` (404) or the :class:`ApiError` of a failed
    read. Never raises: each gap is a note naming the Lease, what is unknown, what is
    used instead and what would fix it."""
    if isinstance(lease, ApiError):
        fix = (
            f"; grant get on leases.coordination.k8s.io {where.split('/')[1]} in namespace"
            f" {where.split('/')[0]} (ClusterRole node-ipam-lb-preview)"
            if lease.status == FORBIDDEN
            else ""
        )
        return ControllerView(
            where,
            notes=(
                f"cannot get lease {where} ({elide(str(lease), 300)}): the running"
                f" controller's settings and node health are unknown; decided with"
                f" {OWN_SETTINGS} and no node health{fix}",
            ),
        )
    if lease is None:
        return ControllerView(
            where,
            notes=(
                f"lease {where} not found: the running controller's settings and node health"
                " are unknown (its Lease holder publishes them there: is it installed in"
                " another namespace or with another leader-election-id,"
                " --leader-election-namespace, --leader-election-id, or a version that does"
                f" not publish them?); decided with {OWN_SETTINGS} and no node health",
            ),
        )
    annotations = _annotations(lease)
    notes: list[str] = []
    settings: dict[str, Any] | None = None
    text = annotations.get(SETTINGS_ANNOTATION)
    if text is None:
        notes.append(
            f"lease {where} has no annotation {SETTINGS_ANNOTATION} (a controller version"
            " that does not publish it): its settings, and so whether its node health is in"
            f" force, are unknown; decided with {OWN_SETTINGS} and no node health"
        )
    else:
        try:
            settings = decode_settings(text)
        except ValueError as err:
            notes.append(
                f"lease {where}: {elide(str(err), 300)}: the running controller's settings"
                f" are unknown; decided with {OWN_SETTINGS} and no node health"
            )
    if settings is None or settings.get("node-health-check") is not True:
        # Health checks off (or not known to be on): a record left from when they were on
        # is not in force.
        return ControllerView(where, settings, NO_UNHEALTHY, tuple(notes))
    try:
        unhealthy = decode_unhealthy(annotations.get(HEALTH_ANNOTATION))
    except ValueError as err:
        notes.append(
            f"lease {where}: {elide(str(err), 300)}: the Lease holder's node health is"
            " unknown; decided with no node health"
        )
        unhealthy = {}
    return ControllerView(where, settings, unhealthy or NO_UNHEALTHY, tuple(notes))


def resolve(
    config: SelectionConfig, view: ControllerView, *, given: Mapping[str, str]
) -> tuple[SelectionConfig, list[str]]:
    """The settings to decide with, and the notes to print.

    ``config`` is this command's (flags over ``NODE_IPAM_*`` variables over defaults);
    ``given`` maps each field the user set to how (``--allowed-namespaces`` or
    ``NODE_IPAM_ALLOWED_NAMESPACES``). With published settings the answer is the
    controller's: each published value, except the given ones, which make it a "what if"
    (one note naming each that differs, with the controller's value). Published names this
    command does not know (a newer controller) and published settings it lacks (an older
    one, or a value too long to publish) are noted; so are published values that are not
    valid here, and then this command's settings are used whole.

    Raises:
        InvalidSettings: a given setting cannot go with the controller's others (e.g.
            ``--address-types InternalIP`` with its ``per-node-address-fallback``); the
            message names the setting and the Lease.
    """
    notes = list(view.notes)
    if view.settings is None:
        return config, notes
    fields = {name.replace("_", "-"): name for name in SelectionConfig.model_fields}
    known = {fields[k]: v for k, v in view.settings.items() if k in fields}
    unknown = sorted(k for k in view.settings if k not in fields and k != "node-health-check")
    if unknown:
        notes.append(
            f"the running controller decides with settings this preview does not know:"
            f" {', '.join(unknown)} (a newer version): this answer ignores them"
        )
    try:
        theirs = from_flags(SelectionConfig, known)
    except InvalidSettings as err:
        notes.append(
            f"lease {view.where}: the published settings are not valid here"
            f" ({elide(str(err), 300)}); decided with {OWN_SETTINGS}"
        )
        return config, notes
    missing = [
        name
        for name in PUBLISHED_SETTINGS
        if name in SelectionConfig.model_fields and name not in known and name not in given
    ]
    if missing:
        shown = ", ".join(name.replace("_", "-") for name in missing)
        notes.append(
            f"lease {view.where} publishes no value of {shown} (a version that does not"
            f" publish it, or a value too long to publish): decided with {OWN_SETTINGS}"
            " for those"
        )
    try:
        chosen = from_flags(
            SelectionConfig, {**known, **{name: getattr(config, name) for name in given}}
        )
    except InvalidSettings as err:
        raise InvalidSettings(
            f"{err} (with the running controller's other settings, lease {view.where})"
        ) from err
    differ = [
        f"{how} {_shown(getattr(chosen, name))} (the controller's: {_shown(getattr(theirs, name))})"
        for name, how in sorted(given.items())
        if name in known and _normal(theirs, name) != _normal(chosen, name)
    ]
    if differ:
        notes.append(
            f"a what-if: decided with {'; '.join(differ)} over the running controller's"
            " settings; without them the answer is the controller's"
        )
    return chosen, notes


def _normal(config: SelectionConfig, name: str) -> Any:
    """``name``'s value as a decision reads it (``address-types`` in either order)."""
    selection = config.selection()
    return getattr(selection, name, getattr(config, name))


def _shown(value: Any) -> str:
    return elide(json.dumps(value, ensure_ascii=False), 200)


def _annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    meta = obj.get("metadata")
    found = meta.get("annotations") if isinstance(meta, Mapping) else None
    return (
        {k: v for k, v in found.items() if isinstance(v, str)} if isinstance(found, Mapping) else {}
    )
