#ifndef OFFLINE_AGENT_COFFLINESDBUS_H
#define OFFLINE_AGENT_COFFLINESDBUS_H

/*
 * The agent's D-Bus objects over sd-bus (libsystemd), loaded with dlopen on first use.
 *
 * Why dlopen: `offline-agent sync` runs every minute and is mostly a throttled no-op that
 * must stay within 5 ms; linking libsystemd would make the dynamic loader map it (and its
 * libraries) in every run. Only `serve --dbus` loads it (the pattern of clibzip.h).
 *
 * Why C: sd-bus's object tables are C macros and its message calls are variadic. The
 * tables live here and route every call and property read to one Swift handler.
 *
 * Threads: an sd_bus connection is not thread-safe. Every function taking an sd_bus or
 * an sd_bus_message must be called from the one thread that owns the connection.
 */

#include <stdint.h>
#include <sys/types.h>
#include <systemd/sd-bus.h>

/* The objects the service exports; `id` names the app or job (decoded from the path). */
typedef enum {
    C_SDBUS_MANAGER = 0,
    C_SDBUS_APP = 1,
    C_SDBUS_JOB = 2,
} c_sdbus_object;

/* Collects the children a node enumerator lists (apps or jobs); see c_sdbus_names_add. */
typedef struct c_sdbus_names c_sdbus_names;

/* The Swift side. Every callback runs on the connection's thread, inside c_sdbus_process. */
typedef struct {
    void *_Nullable context;
    /* A method call on `object` `id`: reply (now or later, keeping a reference to `call`) and
     * return 1, or set `error` and return a negative errno. */
    int (*_Nonnull method)(void *_Nullable context, sd_bus_message *_Nonnull call, int object,
                           const char *_Nonnull id, sd_bus_error *_Nonnull error);
    /* A property read: append the value to `reply` and return 0, or set `error` and return < 0. */
    int (*_Nonnull property)(void *_Nullable context, sd_bus_message *_Nonnull reply, int object,
                             const char *_Nonnull id, const char *_Nonnull property, sd_bus_error *_Nonnull error);
    /* 1 when `object` `id` exists (an installed app, a job kept), else 0. */
    int (*_Nonnull exists)(void *_Nullable context, int object, const char *_Nonnull id);
    /* Adds every existing id of `object` with c_sdbus_names_add. */
    void (*_Nonnull enumerate)(void *_Nullable context, int object, c_sdbus_names *_Nonnull names);
} c_sdbus_handlers;

/* Loads libsystemd once per process (thread-safe); 0, or -1 with `*reason` (static storage). */
int c_sdbus_load(const char *_Nullable *_Nonnull reason);

/* Opens the system (`system` != 0) or the session bus (DBUS_SYSTEM_BUS_ADDRESS and
 * DBUS_SESSION_BUS_ADDRESS are honoured); 0 or a negative errno. */
int c_sdbus_open(int system, sd_bus *_Nullable *_Nonnull bus);
/* Flushes, closes and releases the connection (and the objects registered on it). */
void c_sdbus_close(sd_bus *_Nullable bus);
/* Registers the manager, app and job objects with `handlers` (which must outlive the bus). */
int c_sdbus_register(sd_bus *_Nonnull bus, const c_sdbus_handlers *_Nonnull handlers);
/* Requests the well-known name; 0 or a negative errno (-EEXIST: taken). */
int c_sdbus_request_name(sd_bus *_Nonnull bus, const char *_Nonnull name);

/* Event-loop integration: the fd to poll, the poll events, the next timeout (UINT64_MAX:
 * none; CLOCK_MONOTONIC microseconds), one processing step (> 0: call again), a flush. */
int c_sdbus_fd(sd_bus *_Nonnull bus);
int c_sdbus_events(sd_bus *_Nonnull bus);
int c_sdbus_timeout(sd_bus *_Nonnull bus, uint64_t *_Nonnull usec);
int c_sdbus_process(sd_bus *_Nonnull bus);
int c_sdbus_flush(sd_bus *_Nonnull bus);

void c_sdbus_names_add(c_sdbus_names *_Nonnull names, const char *_Nonnull id);

/* Message references (a call answered later is kept with a reference). */
sd_bus_message *_Nonnull c_sdbus_message_ref(sd_bus_message *_Nonnull m);
void c_sdbus_message_unref(sd_bus_message *_Nullable m);
const char *_Nullable c_sdbus_message_member(sd_bus_message *_Nonnull m);
const char *_Nullable c_sdbus_message_signature(sd_bus_message *_Nonnull m);

/* Reading a call's arguments in order; 0 or a negative errno. The string stays valid while
 * the message lives. */
int c_sdbus_read_string(sd_bus_message *_Nonnull m, const char *_Nullable *_Nonnull value);
int c_sdbus_read_bool(sd_bus_message *_Nonnull m, int *_Nonnull value);

/* Building replies and signals. */
int c_sdbus_new_return(sd_bus_message *_Nonnull call, sd_bus_message *_Nullable *_Nonnull reply);
int c_sdbus_new_signal(sd_bus *_Nonnull bus, const char *_Nonnull path, const char *_Nonnull interface,
                       const char *_Nonnull member, sd_bus_message *_Nullable *_Nonnull signal);
int c_sdbus_append_string(sd_bus_message *_Nonnull m, const char *_Nonnull value);
int c_sdbus_append_path(sd_bus_message *_Nonnull m, const char *_Nonnull value);
int c_sdbus_append_bool(sd_bus_message *_Nonnull m, int value);
int c_sdbus_append_u32(sd_bus_message *_Nonnull m, uint32_t value);
int c_sdbus_append_u64(sd_bus_message *_Nonnull m, uint64_t value);
/* Appends a file descriptor (type 'h'): the message keeps a duplicate, the caller still owns `fd`. */
int c_sdbus_append_fd(sd_bus_message *_Nonnull m, int fd);
int c_sdbus_open_array(sd_bus_message *_Nonnull m, const char *_Nonnull contents);
int c_sdbus_close_container(sd_bus_message *_Nonnull m);
int c_sdbus_send(sd_bus_message *_Nonnull m);
/* Answers `call` with the error `name` and `message`. */
int c_sdbus_reply_error(sd_bus_message *_Nonnull call, const char *_Nonnull name, const char *_Nonnull message);
/* Sets `error` (for a synchronous refusal); returns the negative errno sd-bus maps it to. */
int c_sdbus_set_error(sd_bus_error *_Nonnull error, const char *_Nonnull name, const char *_Nonnull message);
/* PropertiesChanged for `names` (NULL-terminated) of `interface` at `path`. */
int c_sdbus_properties_changed(sd_bus *_Nonnull bus, const char *_Nonnull path, const char *_Nonnull interface,
                               char *_Nullable *_Nonnull names);

/* The caller's effective uid and groups (primary first, then supplementary, at most `max`),
 * from the bus (not the message, which a client could fill in). 0 or a negative errno. */
int c_sdbus_sender(sd_bus_message *_Nonnull call, uid_t *_Nonnull uid, gid_t *_Nonnull gids, int max,
                   int *_Nonnull count);

/* A non-blocking, close-on-exec eventfd (the bus thread's wake-up; not in Swift's Glibc
 * module); -1 with errno on failure. Needs no libsystemd. */
int c_sdbus_eventfd(void);

/* An object path for `id` under `prefix` (sd_bus_path_encode's escaping); free() it. NULL on failure. */
char *_Nullable c_sdbus_path_encode(const char *_Nonnull prefix, const char *_Nonnull id);

#endif
