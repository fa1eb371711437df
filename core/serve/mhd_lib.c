/* mhd_lib.c - libmicrohttpd through dlopen (mhd_lib.h says why): each function the server
 * calls is found once with dlsym and called through a pointer. Built only with HAVE_MHD (the
 * headers are needed; the library itself is not linked). */
#ifdef HAVE_MHD
#include "mhd_lib.h"
#include "../dynlib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>

/* The real functions: names as the library exports them, types from our renamed
 * declarations (the same prototypes). */
static struct {
    pthread_once_t once;
    void *so;
    char why[400];
    __typeof__(MHD_start_daemon_va) *start_daemon_va;
    __typeof__(mlsys_mhd_stop_daemon) *stop_daemon;
    __typeof__(mlsys_mhd_lookup_connection_value) *lookup_connection_value;
    __typeof__(mlsys_mhd_get_connection_info) *get_connection_info;
    __typeof__(mlsys_mhd_create_response_from_buffer) *create_response_from_buffer;
    __typeof__(mlsys_mhd_create_response_from_callback) *create_response_from_callback;
    __typeof__(mlsys_mhd_add_response_header) *add_response_header;
    __typeof__(mlsys_mhd_queue_response) *queue_response;
    __typeof__(mlsys_mhd_destroy_response) *destroy_response;
    __typeof__(mlsys_mhd_set_connection_option) *set_connection_option;
    __typeof__(mlsys_mhd_suspend_connection) *suspend_connection;
    __typeof__(mlsys_mhd_resume_connection) *resume_connection;
} g = {.once = PTHREAD_ONCE_INIT};

static void load(void)
{
    static const char *const names[] = {"libmicrohttpd.so.12", "libmicrohttpd.so", NULL};
    char err[256];
    if (!(g.so = mlsys_dl_open_first(names, err, sizeof err))) {
        snprintf(g.why, sizeof g.why, "libmicrohttpd cannot be loaded (%s): apt-get install "
                 "libmicrohttpd12", err);
        return;
    }
    const mlsys_dl_fn fns[] = {
        {(void **)&g.start_daemon_va, "MHD_start_daemon_va"},
        {(void **)&g.stop_daemon, "MHD_stop_daemon"},
        {(void **)&g.lookup_connection_value, "MHD_lookup_connection_value"},
        {(void **)&g.get_connection_info, "MHD_get_connection_info"},
        {(void **)&g.create_response_from_buffer, "MHD_create_response_from_buffer"},
        {(void **)&g.create_response_from_callback, "MHD_create_response_from_callback"},
        {(void **)&g.add_response_header, "MHD_add_response_header"},
        {(void **)&g.queue_response, "MHD_queue_response"},
        {(void **)&g.destroy_response, "MHD_destroy_response"},
        {(void **)&g.set_connection_option, "MHD_set_connection_option"},
        {(void **)&g.suspend_connection, "MHD_suspend_connection"},
        {(void **)&g.resume_connection, "MHD_resume_connection"},
    };
    const char *missing = mlsys_dl_bind(g.so, fns, sizeof fns / sizeof fns[0]);
    if (missing) {
        snprintf(g.why, sizeof g.why, "libmicrohttpd has no %s (too old?)", missing);
        dlclose(g.so);
        g.so = NULL;
    }
}

int mhd_lib_load(void)
{
    pthread_once(&g.once, load);
    return g.so ? 0 : -1;
}

const char *mhd_lib_why(void)
{
    return mhd_lib_load() == 0 ? NULL : g.why;
}

struct MHD_Daemon *mlsys_mhd_start_daemon(unsigned int flags, uint16_t port,
                                          MHD_AcceptPolicyCallback apc, void *apc_cls,
                                          MHD_AccessHandlerCallback dh, void *dh_cls, ...)
{
    if (mhd_lib_load() != 0)
        return NULL;
    va_list ap;
    va_start(ap, dh_cls);
    struct MHD_Daemon *d = g.start_daemon_va(flags, port, apc, apc_cls, dh, dh_cls, ap);
    va_end(ap);
    return d;
}

/* Below, the library is loaded: a daemon exists, so start_daemon loaded it. */

void mlsys_mhd_stop_daemon(struct MHD_Daemon *daemon)
{
    g.stop_daemon(daemon);
}

const char *mlsys_mhd_lookup_connection_value(struct MHD_Connection *connection,
                                              enum MHD_ValueKind kind, const char *key)
{
    return g.lookup_connection_value(connection, kind, key);
}

/* The server asks only for what needs no further argument (the connection's socket). */
const union MHD_ConnectionInfo *mlsys_mhd_get_connection_info(struct MHD_Connection *connection,
                                                              enum MHD_ConnectionInfoType info_type,
                                                              ...)
{
    return g.get_connection_info(connection, info_type);
}

struct MHD_Response *mlsys_mhd_create_response_from_buffer(size_t size, void *buffer,
                                                           enum MHD_ResponseMemoryMode mode)
{
    return g.create_response_from_buffer(size, buffer, mode);
}

struct MHD_Response *mlsys_mhd_create_response_from_callback(uint64_t size, size_t block_size,
                                                             MHD_ContentReaderCallback crc,
                                                             void *crc_cls,
                                                             MHD_ContentReaderFreeCallback crfc)
{
    return g.create_response_from_callback(size, block_size, crc, crc_cls, crfc);
}

enum MHD_Result mlsys_mhd_add_response_header(struct MHD_Response *response, const char *header,
                                              const char *content)
{
    return g.add_response_header(response, header, content);
}

enum MHD_Result mlsys_mhd_queue_response(struct MHD_Connection *connection,
                                         unsigned int status_code, struct MHD_Response *response)
{
    return g.queue_response(connection, status_code, response);
}

void mlsys_mhd_destroy_response(struct MHD_Response *response)
{
    g.destroy_response(response);
}

/* The server sets only the connection's idle timeout, whose one argument is an unsigned int. */
enum MHD_Result mlsys_mhd_set_connection_option(struct MHD_Connection *connection,
                                                enum MHD_CONNECTION_OPTION option, ...)
{
    va_list ap;
    va_start(ap, option);
    unsigned int v = va_arg(ap, unsigned int);
    va_end(ap);
    return g.set_connection_option(connection, option, v);
}

void mlsys_mhd_suspend_connection(struct MHD_Connection *connection)
{
    g.suspend_connection(connection);
}

void mlsys_mhd_resume_connection(struct MHD_Connection *connection)
{
    g.resume_connection(connection);
}
#else
typedef int mhd_lib_unused;          /* ISO C: a translation unit is not empty */
#endif

