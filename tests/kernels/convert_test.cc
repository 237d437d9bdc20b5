// PLACEHOLDER: tests land with their kernels.
