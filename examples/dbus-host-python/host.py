#!/usr/bin/python3
"""A host app in Python over Gio (docs/DBUS.md): shows the page of APP, reloads it when a
new version is installed, and confirms that version once shown.

    python3 host.py APP URL [--system]

Exits 0 after confirming, 1 on an error, 2 when no new version came within 120 s.
"""
import sys

from gi.repository import Gio, GLib

NAME = "org.offlineagent.Agent1"
MANAGER = "/org/offlineagent/Agent1"


def main(app, url, system):
    bus = Gio.bus_get_sync(Gio.BusType.SYSTEM if system else Gio.BusType.SESSION, None)
    manager = Gio.DBusProxy.new_sync(bus, Gio.DBusProxyFlags.NONE, None, NAME, MANAGER, NAME + ".Manager", None)
    loop = GLib.MainLoop()
    outcome = {"status": 2}

    def show(verb):
        location, version, fallback = proxy.Resolve("(s)", url)
        network = ", network: " + fallback if fallback else ""
        print("%s %s (version %s%s)" % (verb, location, version or "none", network), flush=True)

    def on_signal(_proxy, _sender, signal, parameters):
        if signal != "VersionInstalled":
            return
        name, version, previous = parameters.unpack()
        if name != app:
            return
        print("installed %s (was %s)" % (version, previous or "none"), flush=True)
        try:
            show("reload")
            # Confirm the version just shown: a confirmation of any other version changes nothing.
            proxy.Confirm("(s)", version)
            print("confirmed " + version, flush=True)
            outcome["status"] = 0
        except GLib.Error as error:
            print("host: " + error.message, file=sys.stderr)
            outcome["status"] = 1
        loop.quit()

    # Subscribe first, so no install between the first Resolve and the subscription is missed.
    manager.connect("g-signal", on_signal)
    try:
        path = manager.GetApp("(s)", app)
        proxy = Gio.DBusProxy.new_sync(bus, Gio.DBusProxyFlags.NONE, None, NAME, path, NAME + ".App", None)
        show("show")
    except GLib.Error as error:
        print("host: " + error.message, file=sys.stderr)
        return 1
    print("waiting", flush=True)
    GLib.timeout_add_seconds(120, loop.quit)
    loop.run()
    return outcome["status"]


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: host.py APP URL [--system]")
    sys.exit(main(sys.argv[1], sys.argv[2], "--system" in sys.argv[3:]))
