#!/usr/bin/python3
"""A WebKitGTK host over D-Bus, as a kiosk shows an app (run under xvfb-run):

    webkit_host.py APP URL SECONDS

Loads what Resolve(URL) answers, reloads when VersionInstalled names APP, and once the
new version's page has loaded, first confirms another version (which must change
nothing) and then the version it shows. Prints one JSON document: what it did.
"""
import json
import sys

import gi
gi.require_version("Gtk", "3.0")
gi.require_version("WebKit2", "4.1")
from gi.repository import Gio, GLib, Gtk, WebKit2  # noqa: E402

NAME = "org.offlineagent.Agent1"


def main(app, url, seconds):
    bus = Gio.bus_get_sync(Gio.BusType.SESSION, None)
    manager = Gio.DBusProxy.new_sync(bus, 0, None, NAME, "/org/offlineagent/Agent1", NAME + ".Manager", None)
    proxy = Gio.DBusProxy.new_sync(bus, 0, None, NAME, manager.GetApp("(s)", app), NAME + ".App", None)
    report = {"loads": [], "installed": None, "wrong": None, "confirmed": None, "state": None}
    window = Gtk.OffscreenWindow()
    view = WebKit2.WebView()
    window.add(view)
    window.show_all()
    shown = {}
    failures = []  # what WebKit said of a failed load, kept with the load it ended

    def on_failed(_view, _event, uri, error):
        failures.append({"uri": uri, "error": error.message})
        return False

    def load():
        location, version, _fallback = proxy.Resolve("(s)", url)
        shown["version"] = version
        view.load_uri(location)

    def on_load(_view, event):
        if event != WebKit2.LoadEvent.FINISHED:
            return
        report["loads"].append({"uri": view.get_uri(), "title": view.get_title(), "version": shown["version"],
                                "failures": list(failures)})
        if report["installed"] is None:
            print("ready", flush=True)  # the first page rendered: the test may install now
            return
        # The page of the new version rendered: a confirmation of another version changes
        # nothing, then the version shown is confirmed.
        other = report["installed"]["previous"]
        try:
            proxy.Confirm("(s)", other)
            report["wrong"] = "accepted"
        except GLib.Error as error:
            report["wrong"] = Gio.DBusError.get_remote_error(error)
        report["stateAfterWrong"] = proxy.call_sync("org.freedesktop.DBus.Properties.Get",
                                                    GLib.Variant("(ss)", (NAME + ".App", "State")), 0, -1, None).unpack()[0]
        proxy.Confirm("(s)", shown["version"])
        report["confirmed"] = shown["version"]
        report["state"] = proxy.call_sync("org.freedesktop.DBus.Properties.Get",
                                          GLib.Variant("(ss)", (NAME + ".App", "State")), 0, -1, None).unpack()[0]
        Gtk.main_quit()

    def on_signal(_proxy, _sender, signal, parameters):
        if signal == "VersionInstalled" and parameters.unpack()[0] == app:
            _app, version, previous = parameters.unpack()
            report["installed"] = {"version": version, "previous": previous}
            load()

    manager.connect("g-signal", on_signal)
    view.connect("load-changed", on_load)
    view.connect("load-failed", on_failed)
    load()
    GLib.timeout_add_seconds(seconds, Gtk.main_quit)
    Gtk.main()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
