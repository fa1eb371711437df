/* mhd_lib.h - libmicrohttpd is loaded with dlopen when the first server starts, not by the
 * dynamic loader when the program starts: a process that serves nothing (every rank, every
 * command but --serve) does not load it with its TLS stack (gnutls and nine more), and a
 * machine without it runs everything but the server. Included by mhd.h before
 * <microhttpd.h>: the library functions the server calls are renamed to mhd_lib.c's, which
 * call the library's own through dlsym. */
#ifndef MLSYS_SERVE_MHD_LIB_H
#define MLSYS_SERVE_MHD_LIB_H

#define MHD_start_daemon mlsys_mhd_start_daemon
#define MHD_stop_daemon mlsys_mhd_stop_daemon
#define MHD_lookup_connection_value mlsys_mhd_lookup_connection_value
#define MHD_get_connection_info mlsys_mhd_get_connection_info
#define MHD_create_response_from_buffer mlsys_mhd_create_response_from_buffer
#define MHD_create_response_from_callback mlsys_mhd_create_response_from_callback
#define MHD_add_response_header mlsys_mhd_add_response_header
#define MHD_queue_response mlsys_mhd_queue_response
#define MHD_destroy_response mlsys_mhd_destroy_response
#define MHD_set_connection_option mlsys_mhd_set_connection_option
#define MHD_suspend_connection mlsys_mhd_suspend_connection
#define MHD_resume_connection mlsys_mhd_resume_connection

/* Load the library (once; every renamed call does it too). 0, or -1 with why in mhd_lib_why:
 * the renamed calls then fail as the library's do (NULL, MHD_NO). */
int mhd_lib_load(void);
const char *mhd_lib_why(void);        /* NULL when loaded */

#endif
