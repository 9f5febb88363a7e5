"""FlashInfer's GDN prefill built from only the instances a model needs (nvcc era, 0.6.3 - 0.6.13): which
instances, the partial module that holds them, and the router that sends each call to one that holds its
instance (docs/gdn_variants.md).

A feature package: each module sits at the stage ``STAGES`` names and imports only from that stage and the
ones before it (docs/design.md "Feature packages"). This file imports nothing."""

STAGES = {
    "variant_plan": "decision",  # the instance grid, the ones a model or a call needs, the module's plan
    "partial_module": "flashinfer_jit",  # a module of only the planned instances: sources, build, check, load
    "module_router": "flashinfer_jit",  # each call sent to a module that holds its instance
}
