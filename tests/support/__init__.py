"""What the tests share: small actors and machines, fake servers, child processes, row surgery."""
