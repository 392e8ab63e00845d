/*
 * H5FDgdsroute.h: the gdsroute HDF5 virtual file driver (VFD). HDF5 moves every H5Dread,
 * H5Dwrite and metadata transfer of a file opened with it through gdsroute's C ABI, on
 * gdsroute's routes (POSIX, bounce buffers, cuFile) with its fallbacks and counters; device
 * pointers given to H5Dread/H5Dwrite reach gdsroute untouched where HDF5 hands the caller's buffer
 * to the driver. Users' guide: docs/hdf5.md.
 *
 * Two ways in:
 *   - link libhdf5_vfd_gdsroute and call H5Pset_fapl_gdsroute(fapl, NULL) (any HDF5 from 1.10.7);
 *   - HDF5 1.14 and 2.x, unchanged programs: HDF5_DRIVER=gdsroute and HDF5_PLUGIN_PATH naming the
 *     folder that holds the library (the library exports H5PLget_plugin_type/_info).
 *
 * Every function is thread-safe as HDF5 itself is (HDF5 serialises its API); errors go on HDF5's
 * error stack under the error class "gdsroute HDF5 driver", never an abort.
 */
#ifndef H5FDgdsroute_H
#define H5FDgdsroute_H

#include <hdf5.h>
#include <stdint.h>

#if defined(__GNUC__) && __GNUC__ >= 4
#define H5FD_GDSROUTE_API __attribute__((visibility("default")))
#else
#define H5FD_GDSROUTE_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** The driver's name: HDF5_DRIVER=gdsroute, H5Pset_driver_by_name(fapl, "gdsroute", NULL). */
#define H5FD_GDSROUTE_NAME "gdsroute"
/** The driver's value (H5Pset_driver_by_value, HDF5 1.14+), from the range 256-511 that HDF5
 * leaves "for testing new drivers" (H5FDpublic.h): not registered with The HDF Group, so another
 * driver may use the same value, and H5Pset_driver_by_value may then load that one. By name
 * (H5FD_GDSROUTE_NAME) the driver is unambiguous. */
#define H5FD_GDSROUTE_VALUE 317
/** The driver's identifier, registering the driver at its first use. */
#define H5FD_GDSROUTE (H5FD_gdsroute_init())

/** `H5FD_gdsroute_fapl_t.version` of this header. */
#define H5FD_GDSROUTE_FAPL_VERSION 1u
/** `compat_mode`: the handle takes gdsroute's process default (KVIKIO_COMPAT_MODE). */
#define H5FD_GDSROUTE_COMPAT_DEFAULT UINT32_MAX

/** The driver's settings of a file access property list. */
typedef struct H5FD_gdsroute_fapl_t {
    /** H5FD_GDSROUTE_FAPL_VERSION. */
    uint32_t version;
    /** H5FD_GDSROUTE_COMPAT_DEFAULT, or a gdsroute_compat_mode value for the files opened with
     * this list (GDSROUTE_COMPAT_MODE_OFF 0, _ON 1, _AUTO 2, from gdsroute.h). */
    uint32_t compat_mode;
    /** 1: H5Fflush and the flush at close also fsync the file (gdsroute_file_sync); 0: they
     * hand the driver nothing to do, as with sec2 (every write has reached the kernel, or the
     * device through cuFile, when its callback returns). */
    uint32_t sync_on_flush;
} H5FD_gdsroute_fapl_t;

/** Registers the driver once (later calls return the same identifier; under HDF5 1.14+ the
 * identifier of the driver HDF5 loaded as a plugin, if it did, found by its name, never by its
 * value). Threads making their first call at once get one identifier. H5I_INVALID_HID on
 * failure. */
H5FD_GDSROUTE_API hid_t H5FD_gdsroute_init(void);

/** Makes `fapl_id` open files through gdsroute with `config` (NULL: version 1 defaults,
 * COMPAT_DEFAULT and no sync on flush). Fails for a list that is not a file access list and for
 * a config of another version or with values out of range. */
H5FD_GDSROUTE_API herr_t H5Pset_fapl_gdsroute(hid_t fapl_id, const H5FD_gdsroute_fapl_t *config);

/** Copies the driver's settings of `fapl_id` into `*config` (defaults when the list names the
 * driver without settings, as HDF5_DRIVER does). Fails when the list uses another driver. */
H5FD_GDSROUTE_API herr_t H5Pget_fapl_gdsroute(hid_t fapl_id, H5FD_gdsroute_fapl_t *config);

/** The driver's counters, per process, since it was loaded. Append-only: set `struct_size` to
 * sizeof(H5FD_gdsroute_counters_t); the driver writes at most that many bytes. The same counts
 * appear in gdsroute's exit report (GDSROUTE_REPORT) under the section "hdf5". */
typedef struct H5FD_gdsroute_counters_t {
    /** Size of the struct the caller has. */
    uint64_t struct_size;
    /** Files the driver opened. H5Fopen opens once; H5Fcreate opens first without creating (to
     * see whether the file is open already), so over an existing file it opens twice. */
    uint64_t opens;
    /** Opens that failed, HDF5's tentative open of a file H5Fcreate is about to create included. */
    uint64_t open_failures;
    /** Reads of raw data (H5FD_MEM_DRAW: dataset elements, and the global heap HDF5 treats as
     * raw data), and the bytes they took from the file. */
    uint64_t raw_reads;
    uint64_t raw_read_bytes;
    /** Writes of raw data and their bytes. */
    uint64_t raw_writes;
    uint64_t raw_write_bytes;
    /** Reads of metadata (every other memory type) and the bytes they took from the file. */
    uint64_t metadata_reads;
    uint64_t metadata_read_bytes;
    /** Writes of metadata and their bytes. */
    uint64_t metadata_writes;
    uint64_t metadata_write_bytes;
    /** Reads and writes whose buffer gdsroute found in device or managed memory. */
    uint64_t device_buffer_calls;
    /** Reads and writes whose buffer gdsroute found in host memory (a raw-data buffer whose
     * classification failed, gdsroute_memory_kind returning an error, counts in neither). */
    uint64_t host_buffer_calls;
    /** Bytes of reads past the end of the file, filled with zeros as sec2 does. */
    uint64_t zero_filled_bytes;
    /** Callbacks other than open that failed (each with its message on HDF5's error stack):
     * reads, writes, flush, truncate, lock, unlock, close, get_handle, delete. */
    uint64_t errors;
} H5FD_gdsroute_counters_t;

/** Copies the counters into `*counters` (see its `struct_size`). Fails for NULL or a
 * `struct_size` below 8. */
H5FD_GDSROUTE_API herr_t H5FD_gdsroute_get_counters(H5FD_gdsroute_counters_t *counters);

#ifdef __cplusplus
}
#endif

#endif /* H5FDgdsroute_H */
