#!/usr/bin/python3
"""One WebKitGTK web view driven from stdin, for tests (run under xvfb-run):

    webkit_pages.py SECONDS

Prints "ready", then reads one JSON command per line:
  {"load": URL}  navigates the view to URL;
  {"eval": JS}   runs JS in the page shown (the page stays: its state, its version).
Each command is answered with one JSON line {"uri": ..., "result": ...}. A page reports
with `report(value)`, which sets its title to "r<N>:<JSON>" (N: the command's number for
an eval, 0 for a load; the page reads it from `window.reportNumber`). A loaded page that
defines no `report` is answered with what it shows ({"title", "text"}) once it loaded.
Every wait is bounded: a command by COMMAND_SECONDS (then its result is null), the run
by SECONDS. The view's storage is ephemeral: nothing is left behind.
"""
import json
import os
import sys

import gi
gi.require_version("Gtk", "3.0")
gi.require_version("WebKit2", "4.1")
from gi.repository import GLib, Gtk, WebKit2  # noqa: E402

COMMAND_SECONDS = 120
SHOWN = "JSON.stringify({own: typeof report === 'function', title: document.title, " \
        "text: document.body ? document.body.innerText.slice(0, 300) : ''})"


def main(seconds):
    view = WebKit2.WebView.new_with_context(WebKit2.WebContext.new_ephemeral())
    window = Gtk.OffscreenWindow()
    window.add(view)
    window.show_all()
    state = {"expect": None, "timer": None, "count": 0, "buffer": b"", "queue": []}

    def answer(result):
        if state["expect"] is None:
            return
        state["expect"] = None
        if state["timer"] is not None:
            GLib.source_remove(state["timer"])
            state["timer"] = None
        print(json.dumps({"uri": view.get_uri(), "result": result}), flush=True)
        if state["queue"]:
            GLib.idle_add(run_next)

    def on_title(_view, _spec):
        title = view.get_title() or ""
        prefix = state["expect"]
        if prefix is not None and title.startswith(prefix):
            try:
                answer(json.loads(title[len(prefix):]))
            except ValueError:
                answer({"unparsed": title})

    def on_shown(_view, result):
        try:
            shown = json.loads(view.evaluate_javascript_finish(result).to_string())
        except (GLib.Error, ValueError) as error:
            shown = {"own": False, "error": str(error)}
        if not shown.pop("own") and state["expect"] == "r0:":
            answer({"page": shown})

    def on_load(_view, event):
        if event == WebKit2.LoadEvent.FINISHED and state["expect"] == "r0:":
            view.evaluate_javascript(SHOWN, -1, None, None, None, on_shown)

    def on_failed(_view, _event, _uri, error):
        if state["expect"] == "r0:":
            answer({"loadFailed": error.message})
        return False

    def on_timeout():
        state["timer"] = None
        answer(None)
        return False

    def run_next():
        # One command at a time: the next starts once this one is answered.
        if state["expect"] is not None or not state["queue"]:
            return False
        command = state["queue"].pop(0)
        state["count"] += 1
        state["timer"] = GLib.timeout_add_seconds(COMMAND_SECONDS, on_timeout)
        if "load" in command:
            state["expect"] = "r0:"
            view.load_uri(command["load"])
        else:
            number = state["count"]
            state["expect"] = "r%d:" % number
            view.evaluate_javascript("window.reportNumber = %d;\n%s" % (number, command["eval"]),
                                     -1, None, None, None, None)
        return False

    def on_input(fd, _condition):
        chunk = os.read(fd, 65536)
        if not chunk:
            Gtk.main_quit()
            return False
        state["buffer"] += chunk
        while b"\n" in state["buffer"]:
            line, state["buffer"] = state["buffer"].split(b"\n", 1)
            state["queue"].append(json.loads(line))
        if state["expect"] is None:
            run_next()
        return True

    view.connect("notify::title", on_title)
    view.connect("load-changed", on_load)
    view.connect("load-failed", on_failed)
    GLib.unix_fd_add_full(GLib.PRIORITY_DEFAULT, sys.stdin.fileno(), GLib.IOCondition.IN | GLib.IOCondition.HUP, on_input)
    GLib.timeout_add_seconds(seconds, Gtk.main_quit)
    print("ready", flush=True)
    Gtk.main()


if __name__ == "__main__":
    main(int(sys.argv[1]))
