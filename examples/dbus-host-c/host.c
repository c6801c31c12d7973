/* A host app in C over sd-bus (docs/DBUS.md): shows the page of APP, reloads it when a new
 * version is installed, and confirms that version once shown.
 *   cc host.c $(pkg-config --cflags --libs libsystemd) -o host && ./host APP URL [--system]
 * Exits 0 after confirming, 1 on an error, 2 when no new version came within 120 s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-bus.h>

#define NAME "org.offlineagent.Agent1"
#define MANAGER "/org/offlineagent/Agent1"

static char path[256];
static const char *app, *url;
static int done = 2;

static int fail(const char *what, int r, const sd_bus_error *error) {
    fprintf(stderr, "host: %s: %s\n", what, error && error->message ? error->message : strerror(-r));
    done = 1;
    return r;
}

/* Resolve(url): where the web view loads it; prints what it shows. */
static int show(sd_bus *bus, const char *verb) {
    sd_bus_error error = SD_BUS_ERROR_NULL;
    sd_bus_message *reply = NULL;
    const char *location, *version, *fallback;
    int r = sd_bus_call_method(bus, NAME, path, NAME ".App", "Resolve", &error, &reply, "s", url);
    if (r >= 0) r = sd_bus_message_read(reply, "sss", &location, &version, &fallback);
    if (r < 0) fail("Resolve", r, &error);
    else printf("%s %s (version %s%s%s)\n", verb, location, *version ? version : "none", *fallback ? ", network: " : "", fallback);
    fflush(stdout);
    sd_bus_message_unref(reply);
    sd_bus_error_free(&error);
    return r;
}

static int on_installed(sd_bus_message *m, void *userdata, sd_bus_error *unused) {
    (void)unused;
    sd_bus *bus = userdata;
    const char *name, *version, *previous;
    if (sd_bus_message_read(m, "sss", &name, &version, &previous) < 0 || strcmp(name, app) != 0) return 0;
    printf("installed %s (was %s)\n", version, *previous ? previous : "none");
    if (show(bus, "reload") < 0) return 0;
    /* Confirm the version just shown: a confirmation of any other version changes nothing. */
    sd_bus_error error = SD_BUS_ERROR_NULL;
    int r = sd_bus_call_method(bus, NAME, path, NAME ".App", "Confirm", &error, NULL, "s", version);
    if (r < 0) fail("Confirm", r, &error);
    else { printf("confirmed %s\n", version); done = 0; }
    sd_bus_error_free(&error);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: host APP URL [--system]\n"); return 64; }
    app = argv[1], url = argv[2];
    sd_bus *bus = NULL;
    sd_bus_error error = SD_BUS_ERROR_NULL;
    sd_bus_message *reply = NULL;
    const char *found;
    int r = argc > 3 && strcmp(argv[3], "--system") == 0 ? sd_bus_open_system(&bus) : sd_bus_open_user(&bus);
    if (r < 0) return fail("connect", r, NULL), 1;
    /* Subscribe first, so no install between the first Resolve and the match is missed. */
    r = sd_bus_match_signal(bus, NULL, NAME, MANAGER, NAME ".Manager", "VersionInstalled", on_installed, bus);
    if (r < 0) return fail("subscribe", r, NULL), 1;
    r = sd_bus_call_method(bus, NAME, MANAGER, NAME ".Manager", "GetApp", &error, &reply, "s", app);
    if (r < 0 || sd_bus_message_read(reply, "o", &found) < 0) return fail("GetApp", r, &error), 1;
    snprintf(path, sizeof path, "%s", found);
    sd_bus_message_unref(reply);
    if (show(bus, "show") < 0) return 1;
    printf("waiting\n");
    fflush(stdout);
    for (int waited = 0; done == 2 && waited < 120; ) {
        r = sd_bus_process(bus, NULL);
        if (r < 0) return fail("process", r, NULL), 1;
        if (r == 0 && sd_bus_wait(bus, 1000000) == 0) waited++;
    }
    fflush(stdout);
    sd_bus_flush_close_unref(bus);
    return done;
}
