/*
 * test_hdf5_ranks DIR (under mpiexec; a parallel HDF5 only): the driver one file per rank. Each
 * rank writes DIR/rank-R.h5 through the driver (a contiguous dataset of its own seeded random
 * bytes, 1 MiB + R), closes it, opens it again and reads it back whole; every byte is checked,
 * the driver's counters show the rank's own transfers, and rank 0 prints the ranks' total of
 * checks: "N passed, 0 failed". No collective I/O: each file is one rank's, as with a serial HDF5.
 */
#include "hdf5_test.h"

#include <mpi.h>

static int rank_file(const char *dir, int rank) {
    char path[4096];
    snprintf(path, sizeof path, "%s/rank-%d.h5", dir, rank);
    const hsize_t n = (1 << 20) + (hsize_t)rank;
    unsigned char *data = malloc(n), *back = guarded_alloc(n);
    rng_state = 0x9E3779B97F4A7C15ULL + (uint64_t)rank;
    for (hsize_t i = 0; i < n; i++) data[i] = (unsigned char)(next_random() >> 56);

    hid_t fapl = h5t_driver_fapl();
    H5FD_gdsroute_counters_t c0 = h5t_counters();
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    hid_t space = H5Screate_simple(1, &n, NULL);
    hid_t dset = H5Dcreate2(file, "data", H5T_NATIVE_UINT8, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(file >= 0 && dset >= 0);
    CHECK_H5(H5Dwrite(dset, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
    H5Dclose(dset);
    CHECK_H5(H5Fclose(file));

    file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    dset = H5Dopen2(file, "data", H5P_DEFAULT);
    CHECK(file >= 0 && dset >= 0);
    CHECK_H5(H5Dread(dset, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, back));
    CHECK(memcmp(back, data, n) == 0 && guards_intact(back, n));
    H5Dclose(dset);
    CHECK_H5(H5Fclose(file));
    H5FD_gdsroute_counters_t c1 = h5t_counters();
    CHECK(c1.raw_write_bytes - c0.raw_write_bytes == n && c1.raw_read_bytes - c0.raw_read_bytes == n);
    CHECK(c1.errors == c0.errors);

    H5Sclose(space);
    H5Pclose(fapl);
    guarded_free(back);
    free(data);
    return 0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    int rank = 0, ranks = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (argc != 2) {
        if (rank == 0) fprintf(stderr, "usage: mpiexec -n N %s DIR\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    rank_file(argv[1], rank);
    int mine[2] = {check_passed, check_failed}, all[2] = {0, 0};
    MPI_Reduce(mine, all, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    int failed = 0;
    if (rank == 0) {
        printf("%d ranks, one file each through the driver\n", ranks);
        check_passed = all[0];
        check_failed = all[1];
        failed = check_summary();
    }
    MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    H5close(); /* before MPI_Finalize: a parallel HDF5 may call MPI as it closes */
    MPI_Finalize();
    return failed;
}
