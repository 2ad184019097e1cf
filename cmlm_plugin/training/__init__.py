"""What training feeds the model: the noise of each objective (``noise``) and the inputs
built from the model's own first pass, glancing and self-correction (``second_pass``);
plus the exit hook that stops fairseq's batch-prefetch threads (``prefetch_shutdown``)."""
