// PLACEHOLDER: tests land with the tensor core.
