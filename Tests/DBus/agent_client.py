#!/usr/bin/python3
"""Drives offline-agent's D-Bus service through Gio proxies, as a GTK host does.

The bus is $DBUS_SESSION_BUS_ADDRESS. Every command prints one JSON document on stdout;
a D-Bus error is {"error": NAME, "message": TEXT}. Used by Tests/EndToEndTests/DBusServiceTests.

  props APP                       the app object's path and properties (GetAll)
  manager                         the manager's properties
  call APP METHOD SIGNATURE JSON  a method of the app ("-" APP: the manager); JSON: the arguments
  introspect PATH                 the Introspect XML of PATH
  watch SECONDS MEMBER -- CMD...  subscribe to every signal of the manager, run CMD, and
                                  print the signals received until MEMBER arrived or SECONDS passed
  compare XML PATH...              compare the org.offlineagent interfaces of XML with what PATHs answer
  loop N APP URL                  N Resolve and N Get calls; prints the service's RSS before and after
  file APP URL [-- CMD...]        ResolveFile(URL) through Gio's fd list; runs CMD, then reads the
                                  descriptor: {"ok": [BYTES_HEX, MIME, VERSION], "child": ...}
"""
import os
import json
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

from gi.repository import Gio, GLib

NAME = "org.offlineagent.Agent1"
MANAGER = "/org/offlineagent/Agent1"
TIMEOUT_MS = 60000


def bus():
    return Gio.bus_get_sync(Gio.BusType.SESSION, None)


def call(connection, path, interface, method, signature, arguments):
    parameters = GLib.Variant("(" + signature + ")", tuple(arguments)) if signature else None
    try:
        reply = connection.call_sync(NAME, path, interface, method, parameters, None,
                                     Gio.DBusCallFlags.NONE, TIMEOUT_MS, None)
        return {"ok": list(reply.unpack())}
    except GLib.Error as error:
        name = Gio.DBusError.get_remote_error(error)
        prefix = "GDBus.Error:%s: " % name
        message = error.message[len(prefix):] if error.message.startswith(prefix) else error.message
        return {"error": name, "message": message}


def app_path(connection, app):
    answer = call(connection, MANAGER, NAME + ".Manager", "GetApp", "s", [app])
    if "error" in answer:
        print(json.dumps(answer))
        sys.exit(0)
    return answer["ok"][0]


def properties(connection, path, interface):
    return call(connection, path, "org.freedesktop.DBus.Properties", "GetAll", "s", [interface])


def interfaces(xml):
    """The org.offlineagent interfaces of an introspection document, as comparable sets."""
    found = {}
    for interface in ElementTree.fromstring(xml).iter("interface"):
        name = interface.get("name")
        if not name.startswith("org.offlineagent."):
            continue
        members = set()
        for member in interface:
            notes = tuple(sorted((a.get("name"), a.get("value")) for a in member.findall("annotation")))
            if member.tag == "property":
                members.add(("property", member.get("name"), member.get("type"), member.get("access"), notes))
            elif member.tag in ("method", "signal"):
                default = "in" if member.tag == "method" else "out"
                arguments = tuple((a.get("name"), a.get("type"), a.get("direction", default)) for a in member.findall("arg"))
                members.add((member.tag, member.get("name"), arguments, notes))
            elif member.tag == "annotation":
                members.add(("annotation", member.get("name"), member.get("value")))
        found[name] = members
    return found


def main(argv):
    connection = bus()
    command = argv[1]
    if command == "props":
        path = app_path(connection, argv[2])
        print(json.dumps({"path": path, **properties(connection, path, NAME + ".App")}))
    elif command == "manager":
        print(json.dumps(properties(connection, MANAGER, NAME + ".Manager")))
    elif command == "call":
        app, method, signature, arguments = argv[2], argv[3], argv[4], json.loads(argv[5])
        if app == "-":
            print(json.dumps(call(connection, MANAGER, NAME + ".Manager", method, signature, arguments)))
        else:
            path = app if app.startswith("/") else app_path(connection, app)
            print(json.dumps(call(connection, path, NAME + ".App", method, signature, arguments)))
    elif command == "introspect":
        answer = call(connection, argv[2], "org.freedesktop.DBus.Introspectable", "Introspect", "", [])
        print(json.dumps(answer))
    elif command == "watch":
        seconds, last, child = float(argv[2]), argv[3], argv[argv.index("--") + 1:]
        received = []
        loop = GLib.MainLoop()

        def on_signal(_connection, _sender, path, interface, member, parameters):
            received.append({"member": member, "path": path, "args": list(parameters.unpack())})
            if member == last:
                loop.quit()

        connection.signal_subscribe(NAME, NAME + ".Manager", None, MANAGER, None, Gio.DBusSignalFlags.NONE, on_signal)
        # The match rule is in place once a round trip to the bus has been made.
        connection.call_sync("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetId",
                             None, None, Gio.DBusCallFlags.NONE, TIMEOUT_MS, None)
        result = {}
        if child:
            process = subprocess.Popen(child, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

            def on_exit(pid, status):
                out, err = process.communicate()
                result.update(status=process.returncode, stdout=out, stderr=err)
            GLib.child_watch_add(GLib.PRIORITY_DEFAULT, process.pid, on_exit)
        GLib.timeout_add(int(seconds * 1000), loop.quit)
        loop.run()
        if child and not result:
            out, err = process.communicate(timeout=seconds)
            result.update(status=process.returncode, stdout=out, stderr=err)
        print(json.dumps({"signals": received, "child": result}))
    elif command == "compare":
        with open(argv[2]) as file:
            documented = interfaces(file.read())
        live = {}
        for path in argv[3:]:
            answer = call(connection, path, "org.freedesktop.DBus.Introspectable", "Introspect", "", [])
            if "error" in answer:
                print(json.dumps(answer))
                return
            live.update(interfaces(answer["ok"][0]))
        differences = []
        for name in sorted(set(documented) | set(live)):
            for item in sorted(documented.get(name, set()) - live.get(name, set()), key=repr):
                differences.append("only in the file: %s %r" % (name, item))
            for item in sorted(live.get(name, set()) - documented.get(name, set()), key=repr):
                differences.append("only in the service: %s %r" % (name, item))
        print(json.dumps({"differences": differences, "interfaces": len(documented)}))
    elif command == "loop":
        n, app, url = int(argv[2]), argv[3], argv[4]
        path = app_path(connection, app)
        pid = connection.call_sync("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                   "GetConnectionUnixProcessID", GLib.Variant("(s)", (NAME,)), None,
                                   Gio.DBusCallFlags.NONE, TIMEOUT_MS, None).unpack()[0]

        def rss():
            with open("/proc/%d/status" % pid) as status:
                return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
        failures = 0

        def run(times):
            nonlocal failures
            for _ in range(times):
                if "error" in call(connection, path, NAME + ".App", "Resolve", "s", [url]):
                    failures += 1
                if "error" in call(connection, path, "org.freedesktop.DBus.Properties", "Get", "ss", [NAME + ".App", "Whitelist"]):
                    failures += 1
        run(200)  # warm up: the first calls grow caches and arenas once
        before = rss()
        run(n)
        print(json.dumps({"before": before, "after": rss(), "failures": failures}))
    elif command == "file":
        app, url = argv[2], argv[3]
        child = argv[argv.index("--") + 1:] if "--" in argv else []
        path = app_path(connection, app)
        try:
            reply, fds = connection.call_with_unix_fd_list_sync(
                NAME, path, NAME + ".App", "ResolveFile", GLib.Variant("(s)", (url,)), GLib.VariantType("(hss)"),
                Gio.DBusCallFlags.NONE, TIMEOUT_MS, None, None)
        except GLib.Error as error:
            name = Gio.DBusError.get_remote_error(error)
            prefix = "GDBus.Error:%s: " % name
            message = error.message[len(prefix):] if error.message.startswith(prefix) else error.message
            print(json.dumps({"error": name, "message": message}))
            return
        handle, mime, version = reply.unpack()
        fd = fds.get(handle)
        result = {}
        if child:
            done = subprocess.run(child, capture_output=True, text=True)
            result = {"status": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
        with os.fdopen(fd, "rb") as file:
            data = file.read()
        print(json.dumps({"ok": [data.hex(), mime, version], "fds": fds.get_length(), "child": result}))
    else:
        raise SystemExit("unknown command " + command)


if __name__ == "__main__":
    main(sys.argv)
