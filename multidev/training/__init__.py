"""The training loop every engine shares.

``api.train`` takes the user's settings and runs them here or as a job;
``run`` builds the replicas, resumes and trains epoch by epoch; ``loop`` is
one epoch's micro-batches and updates; ``evaluate`` counts every test
sample once; ``interrupt`` stops between steps on a signal; ``prefetch``
places the next minibatch while a step runs.
"""
