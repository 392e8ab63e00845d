/* plain_hdf5 FILE: an HDF5 program that knows nothing of gdsroute (it links HDF5 alone): writes
 * a 3-D float64 dataset with the default file access list, reads it back and checks every
 * value. Run with HDF5_DRIVER=gdsroute and HDF5_PLUGIN_PATH (HDF5 1.13.2+), its I/O goes through
 * the gdsroute driver; tools/hdf5/plugin-test.sh checks the driver's section of gdsroute's exit
 * report for it. Prints "plain_hdf5: ok" and exits 0 when every value matched. */
#include <hdf5.h>

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s FILE\n", argv[0]);
        return 2;
    }
    const hsize_t dims[3] = {40, 50, 60};
    const size_t n = 40 * 50 * 60;
    double *out = malloc(n * sizeof *out), *in = malloc(n * sizeof *in);
    for (size_t i = 0; i < n; i++) out[i] = (double)i * 0.5 - 1000.0;
    hid_t file = H5Fcreate(argv[1], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t space = H5Screate_simple(3, dims, NULL);
    hid_t dset = H5Dcreate2(file, "values", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int ok = file >= 0 && dset >= 0 && H5Dwrite(dset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) >= 0;
    ok = ok && H5Dclose(dset) >= 0 && H5Fclose(file) >= 0;
    file = H5Fopen(argv[1], H5F_ACC_RDONLY, H5P_DEFAULT);
    dset = H5Dopen2(file, "values", H5P_DEFAULT);
    ok = ok && dset >= 0 && H5Dread(dset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, in) >= 0;
    for (size_t i = 0; ok && i < n; i++) ok = in[i] == out[i];
    H5Dclose(dset);
    H5Sclose(space);
    H5Fclose(file);
    free(in);
    free(out);
    printf("plain_hdf5: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
