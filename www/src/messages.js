// The kit's texts in another language: its `messages` option (every text the form kit writes,
// by key; README.md, "A plain HTML form"), here in French. English is the kit's own.
export const LANGUAGES = ['en', 'fr']

const FR = {
  sending: 'Envoi…',
  sendingAgain: 'Nouvel envoi (tentative {attempt}), avec la même clé…',
  waiting: 'Pas encore de réponse. Nouvel essai dans {seconds} s ; il ne comptera pas deux fois.',
  offline:
    'Vous êtes hors ligne. Cette demande partira dès le retour de la connexion, comme la même demande ; le formulaire reste verrouillé jusque-là.',
  unsure:
    'Nous n’avons pas pu confirmer sa réception. Réessayer envoie la même demande, et le serveur ne la traitera pas deux fois ; ou abandonnez-la pour en écrire une nouvelle.',
  reloaded:
    'Cette demande a été envoyée avant le rechargement de la page, et sa réponse s’est perdue. Réessayer envoie la même demande ; le serveur ne la traitera pas deux fois.',
  expired:
    'Nous n’avons pas pu confirmer l’arrivée de ce ticket, et il est trop ancien pour être renvoyé sans risque : il est peut-être arrivé, peut-être pas. Vérifiez avant de l’envoyer de nouveau. « Envoyer comme nouveau ticket » l’envoie comme un nouveau ; « Abandonner » le supprime.',
  discarded: 'Abandonnée. Rien n’a été confirmé ; un nouvel envoi fera une nouvelle demande.',
  sentElsewhere:
    'Cette demande est en cours d’envoi depuis un autre onglet : elle n’a pas été abandonnée. Réessayer affiche sa réponse dès qu’elle arrive ; le serveur ne la traitera pas deux fois.',
  succeeded: 'Envoyé et confirmé.',
  created: 'Ticket n° {id} créé.',
  sent: 'Envoyé.',
  refused: 'Refusé : {problem}',
  conflict:
    'Le serveur garde la clé de cette demande pour un autre contenu. C’est un défaut de la page ; rien n’a été renvoyé. ({problem})',
  misconfigured:
    'Le serveur a refusé la clé d’idempotence : ce formulaire est mal configuré. Rien n’a été fait. ({problem})',
  noAnswer: 'pas de réponse',
  serverAnswered: 'le serveur a répondu {status}',
  secretOne:
    'Cette demande a été interrompue par un rechargement. Par sécurité, {fields} n’a pas été gardé : saisissez-le de nouveau, puis envoyez ; elle part comme la même demande.',
  secretMany:
    'Cette demande a été interrompue par un rechargement. Par sécurité, {fields} n’ont pas été gardés : saisissez-les de nouveau, puis envoyez ; elle part comme la même demande.',
  and: ' et ',
  fieldInvalid: '{field} {reason}',
  fieldReason: 'n’est pas accepté',
  tryAgain: 'Réessayer',
  discard: 'Abandonner',
  sendAsNew: 'Envoyer comme nouveau ticket',
}

/** The kit options that give `lang`'s texts: none for English. */
export function messagesFor(lang) {
  if (lang !== 'fr') return {}
  return {
    messages: FR,
    successMessage: (ticket) => `Ticket n° ${ticket.id} créé : « ${ticket.subject} ».`,
  }
}
