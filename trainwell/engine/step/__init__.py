"""One optimizer step: forward, loss, backward, clipping and the update (the Stepper), the step-
function contract, precision and the step's clock."""
