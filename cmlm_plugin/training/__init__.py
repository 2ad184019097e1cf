"""What training feeds the model: the noise of each objective (``noise``) and the inputs
built from the model's own first pass, glancing and self-correction (``second_pass``)."""
